package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.ThawFunction;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A language model whose tests control its pace: it "generates" its prompt's own tokens, one per step, each sent as a
 * part, and after {@link #holdAfter} tokens it waits at {@link #GATE} until the test releases it or the request is
 * cancelled (at most 30 s). An instance serves two requests at once (each on a thread of its engine), so the server
 * sends it two. Its counters say what the tests cannot see from outside: requests waiting at the gate, and requests
 * that ended cancelled.
 */
public final class EchoModel implements ThawFunction<EchoModel.State> {

  public static final Semaphore GATE = new Semaphore(0);
  public static final AtomicInteger HELD = new AtomicInteger();
  public static final AtomicInteger CANCELLED = new AtomicInteger();
  /** Tokens a request sends before it waits at the gate. */
  public static volatile int holdAfter = Integer.MAX_VALUE;

  public record State(int concurrency) {}

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    session.allocate("weights", 4096);
    return new State(config.path("concurrency").asInt(2));
  }

  @Override
  public FunctionSignature signature(State s) {
    return new FunctionSignature(List.of(), List.of(), Optional.of(new FunctionSignature.LanguageModel("r50k_base",
        50257, 256, 4, null, List.of(), true)));
  }

  @Override
  public int concurrency(State s) {
    return s.concurrency();
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) throws Exception {
    return invoke(session, s, request, ResponseStream.unstreamed());
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request, ResponseStream stream)
      throws Exception {
    JsonNode prompts = request.json().get("tokens");
    int max = request.json().path("maxNewTokens").asInt(16);
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode all = out.putArray("tokens");
    for (int b = 0; b < prompts.size(); b++) {
      all.addArray();
    }
    boolean cancelled = false;
    for (int step = 0; step < max && !cancelled; step++) {
      if (step == holdAfter) {
        HELD.incrementAndGet();
        try {
          long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
          while (!stream.cancelled() && System.nanoTime() < until && !GATE.tryAcquire(1, TimeUnit.MILLISECONDS)) {
            // Waiting for the test, or for the client to leave.
          }
        } finally {
          HELD.decrementAndGet();
        }
      }
      if (stream.cancelled()) {
        cancelled = true;
        CANCELLED.incrementAndGet();
        break;
      }
      ObjectNode part = JsonNodeFactory.instance.objectNode();
      ArrayNode added = part.putArray("tokens");
      for (int b = 0; b < prompts.size(); b++) {
        JsonNode p = prompts.get(b);
        int id = p.get(step % p.size()).asInt();
        ((ArrayNode) all.get(b)).add(id);
        added.addArray().add(id);
      }
      stream.part(part);
    }
    ArrayNode finish = out.putArray("finish");
    for (int b = 0; b < prompts.size(); b++) {
      finish.add(cancelled ? "cancelled" : "length");
    }
    return FunctionResponse.of(out);
  }

  /** Each request on a thread of its own: the engine only needs requests to overlap. */
  @Override
  public FunctionEngine engine(FunctionSession session, State s) {
    ExecutorService threads = Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "echo-model");
      t.setDaemon(true);
      return t;
    });
    return new FunctionEngine() {
      @Override
      public CompletableFuture<FunctionResponse> submit(FunctionRequest request, ResponseStream stream) {
        CompletableFuture<FunctionResponse> f = new CompletableFuture<>();
        threads.execute(() -> {
          try {
            f.complete(invoke(session, s, request, stream));
          } catch (Throwable e) {
            f.completeExceptionally(e);
          }
        });
        return f;
      }

      @Override
      public void close() {
        threads.shutdownNow();
      }
    };
  }
}
