package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.ResponseStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A request's response in parts through the worker protocol: PART frames reach the caller while the function still
 * runs, in order, before its RESULT; CANCEL reaches a request that runs (and one queued behind it) and the function
 * ends it; a request not streamed gets no parts; a cancel after the answer changes nothing; a stream that keeps
 * sending outlives the invoke deadline. A real worker process and a real store, on the device {@code THAW_DEVICE}
 * picks. Nothing here waits on a timing: the function holds until it is cancelled.
 */
class StreamingWorkerTest {

  @TempDir static Path dir;
  static PoolTestImages.Built probe;
  static ContextPool pool;
  static Worker worker;

  @BeforeAll
  static void start() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
    pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setIdleTarget(0)
        .setInvokeTimeout(Duration.ofSeconds(3)));
    worker = pool.acquire(0, WAIT);
    worker.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
  }

  @AfterAll
  static void stop() throws Exception {
    if (worker != null) {
      worker.release();
    }
    if (pool != null) {
      pool.close();
    }
  }

  private static JsonNode answer(CompletableFuture<InvokeResult> f) throws Exception {
    return f.get(WAIT.toSeconds(), TimeUnit.SECONDS).jsonTree();
  }

  @Test
  void partsArriveWhileTheFunctionRunsAndACancelEndsItAndTheOneQueuedBehindIt() throws Exception {
    List<JsonNode> parts = new CopyOnWriteArrayList<>();
    CountDownLatch three = new CountDownLatch(3);
    ResponseStream first = ResponseStream.streamed(p -> {
      parts.add(p);
      three.countDown();
    });
    CompletableFuture<InvokeResult> held = worker.invoke(json("{\"op\": \"stream\", \"parts\": 3, \"holdMillis\": "
        + "100000}"), null, Duration.ofSeconds(120), first);
    ResponseStream second = ResponseStream.streamed(p -> { });
    CompletableFuture<InvokeResult> queued = worker.invoke(json("{\"op\": \"stream\", \"parts\": 1, "
        + "\"holdMillis\": 100000}"), null, Duration.ofSeconds(120), second);
    assertTrue(three.await(WAIT.toSeconds(), TimeUnit.SECONDS), "three parts arrived");
    assertFalse(held.isDone(), "the parts came while the function still ran (it holds until cancelled)");
    // The second waits behind the first (this function serves one at a time): its cancel ends it before it sends.
    second.cancel();
    first.cancel();
    JsonNode a = answer(held);
    assertEquals(3, a.get("parts").asInt());
    assertTrue(a.get("cancelled").asBoolean(), a.toString());
    for (int i = 0; i < 3; i++) {
      assertEquals(i, parts.get(i).get("n").asInt(), "in order");
    }
    assertEquals(3, parts.size(), "no part after the answer");
    JsonNode b = answer(queued);
    assertTrue(b.get("cancelled").asBoolean(), b.toString());
    assertEquals(0, b.get("parts").asInt(), "cancelled before it began");
  }

  @Test
  void aRequestNotStreamedGetsNoPartsAndACancelAfterItsAnswerChangesNothing() throws Exception {
    List<JsonNode> parts = new CopyOnWriteArrayList<>();
    ResponseStream quiet = ResponseStream.unstreamed();
    JsonNode a = answer(worker.invoke(json("{\"op\": \"stream\", \"parts\": 2}"), null, null, quiet));
    assertEquals(2, a.get("parts").asInt());
    assertFalse(a.get("cancelled").asBoolean());
    assertTrue(parts.isEmpty());
    quiet.cancel();
    assertEquals(1, answer(worker.invoke(json("{\"op\": \"echo\", \"value\": 1}"))).get("echo").asInt(),
        "the worker serves on");
    assertTrue(worker.isAlive());
  }

  @Test
  void aStreamThatKeepsSendingOutlivesTheInvokeDeadline() throws Exception {
    // The pool's deadline is 3 s; parts every 50 ms for 4.5 s keep the request alive.
    List<JsonNode> parts = new CopyOnWriteArrayList<>();
    JsonNode a = answer(worker.invoke(json("{\"op\": \"stream\", \"parts\": 90, \"everyMillis\": 50}"), null, null,
        ResponseStream.streamed(parts::add)));
    assertEquals(90, a.get("parts").asInt());
    assertEquals(90, parts.size());
    assertTrue(worker.isAlive(), "not killed for its length");
  }
}
