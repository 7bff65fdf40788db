package dev.thaw.pool;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.ThawFunction;
import java.util.concurrent.CompletableFuture;

/**
 * A function served through an engine (concurrency 2) whose engine takes {@code stopMillis} to close, ignoring
 * interrupts, as a function that does not stop when asked would: a worker dropping its image waits that long.
 */
public final class SlowStopFunction implements ThawFunction<SlowStopFunction.State> {

  public record State(BufferRef weights, long stopMillis) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    BufferRef w = session.allocate("w", 1 << 20);
    session.context().memsetD8(session.address(w), (byte) 0x33, 1 << 20);
    return new State(w, config.path("stopMillis").asLong(0));
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    return FunctionResponse.of(JsonNodeFactory.instance.objectNode().put("pid", ProcessHandle.current().pid()));
  }

  @Override
  public int concurrency(State state) {
    return 2;
  }

  @Override
  public FunctionEngine engine(FunctionSession session, State state) {
    return new FunctionEngine() {
      @Override
      public CompletableFuture<FunctionResponse> submit(FunctionRequest request, ResponseStream stream) {
        return CompletableFuture.completedFuture(invoke(session, state, request));
      }

      @Override
      public void close() {
        long until = System.nanoTime() + state.stopMillis() * 1_000_000;
        while (System.nanoTime() < until) {
          try {
            Thread.sleep(Math.max(1, (until - System.nanoTime()) / 1_000_000));
          } catch (InterruptedException e) {
            // Does not stop when asked: the point of this function.
          }
        }
      }
    };
  }
}
