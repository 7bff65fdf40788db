package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.gpu.Dim3;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Random;

/**
 * A small function for the session tests: init uploads x and y; invoke computes {@code a*x + y} into a
 * scratch buffer and returns its sum and a few values. Uses the contract suite's kernels.
 */
public final class SaxpyFunction implements ThawFunction<SaxpyFunction.State> {

  public record State(int n, BufferRef x, BufferRef y, BufferRef out, KernelRef saxpy) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) throws IOException {
    int n = config.path("n").asInt(4096);
    if (n <= 0) {
      throw new InvalidConfigException("n must be positive, not " + n);
    }
    String ptx;
    try (InputStream in = getClass().getResourceAsStream("/dev/thaw/runtime/gpu/contract/contract.ptx")) {
      ptx = new String(in.readAllBytes(), StandardCharsets.UTF_8);
    }
    session.loadModule("contract", ptx);
    BufferRef x = session.allocate("x", 4L * n);
    BufferRef y = session.allocate("y", 4L * n);
    BufferRef out = session.allocate("out", 4L * n);
    Random r = new Random(config.path("seed").asLong(1));
    ByteBuffer xs = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    ByteBuffer ys = ByteBuffer.allocateDirect(4 * n).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < n; i++) {
      xs.putFloat(4 * i, r.nextFloat());
      ys.putFloat(4 * i, r.nextFloat());
    }
    session.upload(x, 0, xs);
    session.upload(y, 0, ys);
    return new State(n, x, y, out, session.kernelRef("contract", "thaw_test_saxpy"));
  }

  @Override
  public void validate(State s, FunctionRequest request) {
    a(request);
  }

  private static JsonNode a(FunctionRequest request) {
    JsonNode a = request.json().get("a");
    if (a == null || !a.isNumber()) {
      throw new InvalidRequestException("the request needs a number 'a'");
    }
    return a;
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    JsonNode a = a(request);
    session.context().copyDeviceToDevice(session.address(s.out()), session.address(s.y()), 4L * s.n());
    session.launch(s.saxpy(), Dim3.of((s.n() + 255) / 256), Dim3.of(256), a.floatValue(), s.x(), s.out(), s.n());
    ByteBuffer out = ByteBuffer.allocateDirect(4 * s.n()).order(ByteOrder.LITTLE_ENDIAN);
    session.download(s.out(), 0, out);
    double sum = 0;
    for (int i = 0; i < s.n(); i++) {
      sum += out.getFloat(4 * i);
    }
    ObjectNode json = JsonNodeFactory.instance.objectNode().put("sum", sum).put("first", out.getFloat(0));
    return FunctionResponse.of(json);
  }
}
