package dev.thaw.image.restore;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * A planted kernel that reads a buffer outside its arguments: {@code spec_pointer_table} reads {@code t0} through a
 * one-entry table into {@code out}, then {@code spec_args_only} doubles {@code out} into {@code doubled}. Profiling
 * must call the first {@code unsafe} (speculation misses {@code t0}) and the second {@code exact}. The kernels are
 * the speculation tests' ({@code runtime/src/test/cuda/speculation.cu}): PTX for a GPU, Java twins on the sim.
 */
public final class PlantedTableFunction implements ThawFunction<PlantedTableFunction.State> {

  static final String MODULE = "planted";
  static final String TABLE = MODULE + "/spec_pointer_table";
  static final String ARGS_ONLY = MODULE + "/spec_args_only";

  public record State(int n, BufferRef tables, BufferRef t0, BufferRef out, BufferRef doubled, KernelRef table,
      KernelRef argsOnly) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    int n = config.path("n").asInt(1000);
    session.loadModule(MODULE, ptx("spec_args_only", "spec_pointer_table"));
    BufferRef tables = session.allocate("tables", 8);
    BufferRef t0 = session.allocate("t0", 4L * n);
    BufferRef out = session.allocate("out", 4L * n);
    BufferRef doubled = session.allocate("doubled", 4L * n);
    ByteBuffer values = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      values.putFloat(4 * i, 0.25f * i - 7);
    }
    session.upload(t0, 0, values);
    session.upload(tables, 0, ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN)
        .putLong(0, session.address(t0)));
    return new State(n, tables, t0, out, doubled, session.kernelRef(MODULE, "spec_pointer_table"),
        session.kernelRef(MODULE, "spec_args_only"));
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    Dim3 grid = Dim3.of((s.n() + 255) / 256);
    Dim3 block = Dim3.of(256);
    session.launch(s.table(), grid, block, s.tables(), 1, s.out(), s.n());
    session.launch(s.argsOnly(), grid, block, s.out(), s.doubled(), s.n());
    ByteBuffer got = ByteBuffer.allocateDirect(4 * s.n()).order(ByteOrder.LITTLE_ENDIAN);
    session.download(s.doubled(), 0, got);
    double sum = 0;
    for (int i = 0; i < s.n(); i++) {
      sum += got.getFloat(4 * i);
    }
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode().put("sum", sum));
  }

  /** A module of only {@code entries} of the speculation tests' PTX, under the same names (the sim's twins). */
  static String ptx(String... entries) {
    String all;
    try (InputStream in = PlantedTableFunction.class.getResourceAsStream(
        "/dev/thaw/runtime/speculation/speculation.ptx")) {
      all = new String(in.readAllBytes(), StandardCharsets.US_ASCII);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    StringBuilder out = new StringBuilder(all.substring(0, all.indexOf("\n.func") + 1));
    for (String e : entries) {
      int start = all.indexOf("\t// .globl\t" + e + "\n");
      int end = all.indexOf("\n}\n", start);
      out.append(all, start, end + 3);
    }
    return out.toString();
  }
}
