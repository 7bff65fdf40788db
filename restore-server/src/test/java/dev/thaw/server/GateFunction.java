package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ThawFunction;
import java.nio.ByteBuffer;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A function whose requests the test controls: {@code {"hold": true}} waits until the test releases {@link #GATE}
 * (at most 20 s), {@code {"sleepMillis": n}} sleeps (for a child process the test cannot reach), {@code {"print":
 * "text"}} prints to stderr first, as a function's own debugging would, {@code {"fail": true}} throws as a device
 * fault would, {@code {"halt": n}} ends its process with status n (in a pool worker only). It keeps a counter in
 * device memory, so every request goes to the device and back.
 */
public final class GateFunction implements ThawFunction<GateFunction.State> {

  /** Permits for held requests. */
  public static final Semaphore GATE = new Semaphore(0);
  /** Held requests now waiting at the gate. */
  public static final AtomicInteger WAITING = new AtomicInteger();

  public record State(BufferRef counter) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    BufferRef counter = session.allocate("counter", 4096);
    session.upload(counter, 0, ByteBuffer.allocateDirect(8));
    return new State(counter);
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) throws Exception {
    JsonNode json = request.json();
    if (json.has("print")) {
      System.err.println(json.get("print").asText());
      System.err.flush();
    }
    if (json.has("halt")) {
      Runtime.getRuntime().halt(json.get("halt").asInt());
    }
    if (json.has("bad")) {
      throw new InvalidRequestException("'bad' is refused");
    }
    if (json.path("hold").asBoolean(false)) {
      WAITING.incrementAndGet();
      try {
        if (!GATE.tryAcquire(20, TimeUnit.SECONDS)) {
          throw new IllegalStateException("the test never opened the gate");
        }
      } finally {
        WAITING.decrementAndGet();
      }
    }
    if (json.has("sleepMillis")) {
      Thread.sleep(json.get("sleepMillis").asLong());
    }
    if (json.path("fail").asBoolean(false)) {
      throw new IllegalStateException("a simulated device fault");
    }
    ByteBuffer b = ByteBuffer.allocateDirect(8);
    session.download(s.counter(), 0, b);
    long n = b.getLong(0) + 1;
    b.putLong(0, n);
    session.upload(s.counter(), 0, b);
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode().put("count", n)
        .put("bytes", request.binary().map(ByteBuffer::remaining).orElse(-1)));
  }
}
