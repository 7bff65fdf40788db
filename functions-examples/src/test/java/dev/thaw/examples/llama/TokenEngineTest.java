package dev.thaw.examples.llama;

import static dev.thaw.examples.llama.LlamaFunctionTest.assertLogitsClose;
import static dev.thaw.examples.llama.LlamaFunctionTest.json;
import static dev.thaw.examples.llama.LlamaFunctionTest.prompts;
import static dev.thaw.examples.llama.LlamaFunctionTest.tokens;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenEngine;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Continuous batching ({@link TokenEngine}) on a tiny Llama on the sim device: requests that share its decode steps
 * answer as the CPU reference does for each alone; a request joins a running batch between steps and leaves before
 * it; requests beyond the KV-cache rows wait their turn; a cancelled request ends within a step and frees its row for
 * the one waiting; parts add up to the response; stop tokens, sampling by seed, log-probabilities, no new tokens, text,
 * and refusals. Nothing waits on a timing: order is forced through the parts the engine's thread delivers.
 */
class TokenEngineTest {

  private static final long WAIT = 120;

  /** A tiny Llama (seed 7) in a recorded session, its engine, and its CPU reference. */
  private record Served(SimDriver driver, GpuContext ctx, FunctionSession session, LlamaFunction f,
      LlamaFunction.State state, FunctionEngine engine, LlamaReference ref) implements AutoCloseable {

    static Served of(String model, int maxBatch) throws Exception {
      LlamaConfig config = LlamaConfig.named(model);
      SimDriver driver = SimDriver.open(new SimOptions());
      GpuContext ctx = driver.createContext(0);
      FunctionSession session = FunctionSession.record(ctx);
      LlamaFunction f = new LlamaFunction();
      LlamaFunction.State s = f.init(session, json("{\"model\": \"" + model + "\", \"seed\": 7, \"maxBatch\": "
          + maxBatch + ", \"maxTokens\": 40}"));
      return new Served(driver, ctx, session, f, s, f.engine(session, s),
          LlamaReference.load(new SeededLlamaWeights(config, 7)));
    }

    CompletableFuture<FunctionResponse> submit(JsonNode body, ResponseStream stream) {
      return engine.submit(FunctionRequest.of(body), stream);
    }

    @Override
    public void close() {
      engine.close();
      session.close();
      ctx.close();
      driver.close();
    }
  }

  private static JsonNode answer(CompletableFuture<FunctionResponse> f) throws Exception {
    return f.get(WAIT, TimeUnit.SECONDS).json();
  }

  private static ObjectNode body(int[] prompt, int maxNew) {
    return TokenRequest.body(new int[][] {prompt}, maxNew, false);
  }

  @Test
  void requestsThatShareTheDecodeStepsAnswerAsTheReferenceDoesForEachAlone() throws Exception {
    int[][] prompts = {{5, 17, 90, 3}, {42}, prompts(1, 9, 101, 3)[0], prompts(1, 20, 101, 4)[0]};
    int[] maxNew = {6, 9, 4, 7};
    try (Served s = Served.of("tiny-qwen2", 4)) {
      List<CompletableFuture<FunctionResponse>> all = new ArrayList<>();
      for (int b = 0; b < prompts.length; b++) {
        ObjectNode r = body(prompts[b], maxNew[b]).put("returnLogits", true);
        all.add(s.submit(r, ResponseStream.unstreamed()));
      }
      for (int b = 0; b < prompts.length; b++) {
        JsonNode got = answer(all.get(b));
        LlamaReference.Result expected = s.ref().generate(new int[][] {prompts[b]}, maxNew[b]);
        assertArrayEquals(expected.tokens()[0], tokens(got)[0], "request " + b + ": greedy tokens");
        assertLogitsClose(expected.logits()[0], got.get("logits").get(0), "request " + b + ": last logits");
        assertFalse(got.has("finish"), "a greedy request without stop tokens answers as invoke does");
      }
    }
  }

  @Test
  void aRequestJoinsARunningBatchBetweenStepsAndLeavesBeforeIt() throws Exception {
    int[] long1 = prompts(1, 3, 97, 1)[0];
    int[] short1 = prompts(1, 5, 97, 2)[0];
    try (Served s = Served.of("tiny", 2)) {
      List<String> ended = new CopyOnWriteArrayList<>();
      AtomicReference<CompletableFuture<FunctionResponse>> joined = new AtomicReference<>();
      AtomicReference<CompletableFuture<Void>> shortEnded = new AtomicReference<>();
      List<JsonNode> longParts = new CopyOnWriteArrayList<>();
      ResponseStream longStream = ResponseStream.streamed(p -> {
        longParts.add(p);
        if (longParts.size() == 2) {
          // On the engine's thread, between two steps of the long request.
          CompletableFuture<FunctionResponse> f = s.submit(body(short1, 2), ResponseStream.unstreamed());
          shortEnded.set(f.thenRun(() -> ended.add("short after " + longParts.size() + " long parts")));
          joined.set(f);
        }
      });
      CompletableFuture<FunctionResponse> long12 = s.submit(body(long1, 12), longStream);
      CompletableFuture<Void> longEnded = long12.thenRun(() -> ended.add("long"));
      JsonNode l = answer(long12);
      JsonNode sh = answer(joined.get());
      // A join can return before the completing thread has run the other callbacks: wait for them too.
      longEnded.get(30, TimeUnit.SECONDS);
      shortEnded.get().get(30, TimeUnit.SECONDS);
      assertArrayEquals(s.ref().generate(new int[][] {long1}, 12).tokens()[0], tokens(l)[0]);
      assertArrayEquals(s.ref().generate(new int[][] {short1}, 2).tokens()[0], tokens(sh)[0]);
      assertEquals(2, ended.size(), ended.toString());
      assertTrue(ended.get(0).startsWith("short after") && ended.get(1).equals("long"),
          "the short one joined mid-batch and left first: " + ended);
      int partsWhenShortEnded = Integer.parseInt(ended.get(0).replaceAll("\\D+", " ").trim().split(" ")[0]);
      assertTrue(partsWhenShortEnded < 12, "it ended while the long one still ran: " + ended);
    }
  }

  @Test
  void aCancelledRequestEndsWithinAStepAndItsRowServesTheOneWaiting() throws Exception {
    int[] p = prompts(1, 3, 97, 1)[0];
    try (Served s = Served.of("tiny", 1)) {
      AtomicReference<ResponseStream> first = new AtomicReference<>();
      first.set(ResponseStream.streamed(part -> first.get().cancel()));
      CompletableFuture<FunctionResponse> cancelled = s.submit(body(p, 30), first.get());
      // One KV-cache row: this one waits until the first leaves it.
      CompletableFuture<FunctionResponse> next = s.submit(body(p, 4), ResponseStream.unstreamed());
      JsonNode c = answer(cancelled);
      assertTrue(tokens(c)[0].length < 30, "ended early: " + c);
      assertEquals("cancelled", c.get("finish").get(0).asText());
      assertArrayEquals(s.ref().generate(new int[][] {p}, 4).tokens()[0], tokens(answer(next))[0]);

      ResponseStream gone = ResponseStream.unstreamed();
      gone.cancel();
      JsonNode never = answer(s.submit(body(p, 4), gone));
      assertEquals(0, tokens(never)[0].length, "a request cancelled before it ran generates nothing");
    }
  }

  @Test
  void requestsBeyondTheKvCacheRowsWaitTheirTurn() throws Exception {
    try (Served s = Served.of("tiny", 2)) {
      int[][] prompts = prompts(5, 4, 97, 9);
      List<CompletableFuture<FunctionResponse>> all = new ArrayList<>();
      for (int[] p : prompts) {
        all.add(s.submit(body(p, 3), ResponseStream.unstreamed()));
      }
      // A request of two sequences needs both rows at once.
      CompletableFuture<FunctionResponse> pair = s.submit(TokenRequest.body(new int[][] {prompts[0], prompts[1]}, 3,
          false), ResponseStream.unstreamed());
      for (int b = 0; b < prompts.length; b++) {
        assertArrayEquals(s.ref().generate(new int[][] {prompts[b]}, 3).tokens()[0], tokens(answer(all.get(b)))[0]);
      }
      int[][] both = tokens(answer(pair));
      assertArrayEquals(s.ref().generate(new int[][] {prompts[0]}, 3).tokens()[0], both[0]);
      assertArrayEquals(s.ref().generate(new int[][] {prompts[1]}, 3).tokens()[0], both[1]);
    }
  }

  @Test
  void partsAddUpToTheResponseAndStopTokensEndTheirSequence() throws Exception {
    int[] p = prompts(1, 3, 97, 1)[0];
    try (Served s = Served.of("tiny", 2)) {
      int[] greedy = s.ref().generate(new int[][] {p}, 10).tokens()[0];
      ObjectNode r = body(p, 10);
      r.putArray("stopTokens").add(greedy[3]);
      r.put("logprobs", 2);
      List<JsonNode> parts = new CopyOnWriteArrayList<>();
      JsonNode got = answer(s.submit(r, ResponseStream.streamed(parts::add)));
      int stopAt = 0;
      while (greedy[stopAt] != greedy[3]) {
        stopAt++;
      }
      int[] ids = tokens(got)[0];
      assertArrayEquals(java.util.Arrays.copyOf(greedy, stopAt + 1), ids, "greedy to the stop token, kept last");
      assertEquals("stop", got.get("finish").get(0).asText());
      assertEquals(ids.length, parts.size(), "one part per step");
      for (int k = 0; k < ids.length; k++) {
        assertEquals(ids[k], parts.get(k).get("tokens").get(0).get(0).asInt());
        assertEquals(got.get("logprobs").get(0).get(k), parts.get(k).get("logprobs").get(0).get(0));
      }
    }
  }

  @Test
  void samplingDrawsWhatTheSameRequestDrawsAlone() throws Exception {
    int[][] prompts = {prompts(1, 4, 97, 5)[0], prompts(1, 4, 97, 6)[0]};
    try (Served s = Served.of("tiny", 2)) {
      ObjectNode r = TokenRequest.body(prompts, 8, false);
      r.put("temperature", 0.9).put("topP", 0.95).put("seed", 11).put("frequencyPenalty", 0.5).put("logprobs", 1);
      JsonNode alone = s.f().invoke(s.session(), s.state(), FunctionRequest.of(r)).json();
      JsonNode batched = answer(s.submit(r, ResponseStream.unstreamed()));
      assertEquals(alone.get("tokens"), batched.get("tokens"));
      assertEquals(alone.get("finish"), batched.get("finish"));
      assertEquals(alone.get("logprobs"), batched.get("logprobs"));
    }
  }

  @Test
  void noNewTokensAnswersThePromptsLastLogits() throws Exception {
    int[] p = prompts(1, 5, 101, 2)[0];
    try (Served s = Served.of("tiny-qwen2", 1)) {
      JsonNode got = answer(s.submit(body(p, 0).put("returnLogits", true), ResponseStream.unstreamed()));
      assertEquals(0, tokens(got)[0].length);
      assertLogitsClose(s.ref().generate(new int[][] {p}, 0).logits()[0], got.get("logits").get(0), "prompt");
      assertEquals(0, tokens(answer(s.submit(body(p, 0), ResponseStream.unstreamed())))[0].length);
    }
  }

  @Test
  void badRequestsAreRefusedAtOnceAndACloseFailsWhatIsLeft() throws Exception {
    Served s = Served.of("tiny", 1);
    try {
      assertThrows(InvalidRequestException.class, () -> s.submit(json("{\"tokens\": [[1000]]}"),
          ResponseStream.unstreamed()));
      assertThrows(InvalidRequestException.class, () -> s.submit(TokenRequest.body(new int[][] {{1}, {2}}, 2, false),
          ResponseStream.unstreamed()), "two sequences, one row");
      int[] p = prompts(1, 3, 97, 1)[0];
      // The first holds the one row for 35 steps; the second waits for it when the engine closes.
      CompletableFuture<FunctionResponse> held = s.submit(body(p, 35), ResponseStream.unstreamed());
      CompletableFuture<FunctionResponse> waiting = s.submit(body(p, 2), ResponseStream.unstreamed());
      s.engine().close();
      for (CompletableFuture<FunctionResponse> f : List.of(held, waiting)) {
        assertThrows(ExecutionException.class, () -> f.get(WAIT, TimeUnit.SECONDS), "failed, not lost");
      }
      assertThrows(IllegalStateException.class, () -> s.submit(body(p, 2), ResponseStream.unstreamed()));
    } finally {
      s.close();
    }
  }
}
