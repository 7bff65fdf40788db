package dev.thaw.runtime.speculation;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A function whose first kernel reads a buffer that is in none of its arguments: {@code spec_pointer_table} reads
 * {@code t0} through a one-entry table ({@code tables}) into {@code out}; then {@code spec_args_only} doubles
 * {@code out} into {@code doubled}. Speculation misses {@code t0}, so profiling must call the first kernel unsafe,
 * naming {@code t0}, and the second exact. Runs on the sim (the kernels' Java twins) and on a GPU.
 */
public final class PointerTableFunction implements ThawFunction<PointerTableFunction.State> {

  /** The module: the two kernels only, so that it can be instrumented. */
  static final String PTX = SpeculationKernels.ptxOf("spec_args_only", "spec_pointer_table");
  public static final String TABLE = SpeculationKernels.MODULE + "/spec_pointer_table";
  public static final String ARGS_ONLY = SpeculationKernels.MODULE + "/spec_args_only";

  public record State(int n, BufferRef tables, BufferRef t0, BufferRef out, BufferRef doubled, KernelRef table,
      KernelRef argsOnly) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    int n = config.path("n").asInt(1000);
    session.loadModule(SpeculationKernels.MODULE, PTX);
    BufferRef tables = session.allocate("tables", 8);
    BufferRef t0 = session.allocate("t0", 4L * n);
    BufferRef out = session.allocate("out", 4L * n);
    BufferRef doubled = session.allocate("doubled", 4L * n);
    ByteBuffer values = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      values.putFloat(4 * i, 0.25f * i - 7);
    }
    session.upload(t0, 0, values);
    ByteBuffer table = ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, session.address(t0));
    session.upload(tables, 0, table);
    return new State(n, tables, t0, out, doubled, session.kernelRef(SpeculationKernels.MODULE, "spec_pointer_table"),
        session.kernelRef(SpeculationKernels.MODULE, "spec_args_only"));
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
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode().put("sum", sum).put("last",
        got.getFloat(4 * (s.n() - 1))));
  }
}
