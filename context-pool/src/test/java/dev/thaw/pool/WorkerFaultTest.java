package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static dev.thaw.pool.PoolTesting.alive;
import static dev.thaw.pool.PoolTesting.awaitExit;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins what happens when a worker misbehaves, with real processes: its caller gets a typed error naming what
 * happened, a lost worker is dead and replaced, and the pool's other workers carry on. Runs on the device
 * {@code THAW_DEVICE} picks; the two cases that need the sim's memory or copy-speed settings say so and skip
 * elsewhere.
 */
class WorkerFaultTest {

  @TempDir static Path dir;
  static PoolTestImages.Built probe;
  static ContextPool pool;
  static final List<Long> seen = new ArrayList<>();

  @BeforeAll
  static void start() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
    pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setIdleTarget(1).setMaxWorkers(3));
  }

  @AfterAll
  static void stop() throws Exception {
    PoolTesting.closeAndCheck(pool, seen);
  }

  private static Worker probeWorker() {
    Worker w = pool.acquire(0, WAIT);
    seen.add(w.pid());
    w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
    return w;
  }

  private static WorkerException failure(Worker w, String request, Duration deadline) {
    return assertThrows(WorkerException.class, () -> w.invokeBlocking(json(request), null, deadline));
  }

  @Test
  void aWorkerThatNeverAnswersIsKilledAtItsDeadline() throws Exception {
    Worker w = probeWorker();
    WorkerException e = failure(w, "{\"op\": \"hang\"}", Duration.ofSeconds(2));
    assertTrue(e instanceof WorkerLostException && e.kind() == WorkerErrorKind.DEADLINE, e.toString());
    assertTrue(e.getMessage().contains("no answer to INVOKE in 2000 ms"), e.getMessage());
    awaitExit(w.pid());
    assertTrue(!w.isAlive());
    WorkerException again = assertThrows(WorkerException.class, () -> w.invoke(json("{\"op\": \"echo\"}")));
    assertEquals(WorkerErrorKind.DEADLINE, again.kind(), "a dead handle keeps failing the same way");
    assertTrue(pool.awaitIdle(WAIT));
  }

  @Test
  void aWorkerThatDiesMidRequestIsACrashNamingItsExitStatus() throws Exception {
    Worker w = probeWorker();
    WorkerException e = failure(w, "{\"op\": \"exit\", \"status\": 77}", null);
    assertTrue(e instanceof WorkerLostException && e.kind() == WorkerErrorKind.CRASHED, e.toString());
    assertTrue(e.getMessage().contains("exit status 77"), e.getMessage());
    assertTrue(!alive(w.pid()));
  }

  @Test
  void garbageOnTheWorkersStdoutIsAProtocolErrorAndTheWorkerIsKilled() throws Exception {
    Worker w = probeWorker();
    WorkerException e = failure(w, "{\"op\": \"garbage\"}", null);
    assertTrue(e instanceof WorkerLostException && e.kind() == WorkerErrorKind.PROTOCOL, e.toString());
    assertTrue(e.getMessage().contains("not a frame") && e.getMessage().contains("this is not a"),
        e.getMessage());
    awaitExit(w.pid());
  }

  @Test
  void aStickyCudaErrorKillsTheWorkerAndSaysWhichCallFailed() throws Exception {
    Worker w = probeWorker();
    WorkerException e = failure(w, "{\"op\": \"oob\"}", null);
    assertTrue(e instanceof WorkerLostException && e.kind() == WorkerErrorKind.CUDA_STICKY, e.toString());
    assertTrue(e.getMessage().contains("CUDA_ERROR_ILLEGAL_ADDRESS") || e.getMessage().contains("CUDA_ERROR_LAUNCH_FAILED"),
        e.getMessage());
    awaitExit(w.pid());
  }

  @Test
  void badRequestsFunctionErrorsPrintsAndOutOfMemoryLeaveTheWorkerServing() throws Exception {
    Worker w = probeWorker();
    try {
      assertTrue(w.invokeBlocking(json("{\"op\": \"print\"}")).jsonTree().get("printed").asBoolean(),
          "a function printing to stdout does not break the protocol");
      WorkerException oom = failure(w, "{\"op\": \"alloc\", \"bytes\": " + (1L << 40) + "}", null);
      assertTrue(oom instanceof WorkerOutOfMemoryException, oom.toString());
      assertTrue(oom.getMessage().contains("CUDA_ERROR_OUT_OF_MEMORY"), oom.getMessage());
      assertTrue(!oom.workerLost() && w.isAlive());
      WorkerException bad = failure(w, "{\"op\": \"bad\"}", null);
      assertEquals(WorkerErrorKind.INVALID_REQUEST, bad.kind());
      assertEquals("dev.thaw.runtime.function.InvalidRequestException", bad.remoteType());
      assertTrue(bad.getMessage().contains("bad on purpose"), bad.getMessage());
      assertEquals(WorkerErrorKind.INVALID_REQUEST, failure(w, "{{{ not json", null).kind());
      assertEquals(WorkerErrorKind.INVALID_REQUEST, failure(w, "[1, 2]", null).kind());
      WorkerException fail = failure(w, "{\"op\": \"fail\"}", null);
      assertEquals(WorkerErrorKind.FUNCTION, fail.kind());
      assertTrue(!fail.workerLost() && w.isAlive());
      assertEquals(w.pid(), w.invokeBlocking(json("{\"op\": \"echo\"}")).jsonTree().get("pid").asLong());
    } finally {
      w.release();
    }
  }

  /**
   * An INVOKE that finds the worker idle runs on the thread that read it while the other thread takes over stdin:
   * answers stay paired with their requests across those hand-overs, and a worker busy in one still answers STATUS.
   */
  @Test
  void backToBackInvokesAnswerInOrderAndABusyWorkerStillAnswersStatus() throws Exception {
    Worker w = probeWorker();
    for (int i = 0; i < 200; i++) {
      assertEquals(i, w.invokeBlocking(json("{\"op\": \"echo\", \"value\": " + i + "}")).jsonTree()
          .get("echo").asInt(), "answer " + i);
    }
    CompletableFuture<InvokeResult> hung = w.invoke(json("{\"op\": \"hang\"}"), null, Duration.ofSeconds(60));
    long deadline = System.nanoTime() + WAIT.toNanos();
    String state = "";
    while (!state.equals("INVOKING") && System.nanoTime() < deadline) {
      state = w.status().get().state();
    }
    assertEquals("INVOKING", state, "STATUS is answered while an INVOKE runs");
    assertTrue(!hung.isDone());
    w.evict();
    awaitExit(w.pid());
  }

  @Test
  void misuseOfAHandleFailsAtOnce() throws Exception {
    Worker w = pool.acquire(0, WAIT);
    seen.add(w.pid());
    try {
      assertThrows(IllegalStateException.class, () -> w.invoke(json("{}")), "INVOKE before BECOME");
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertThrows(IllegalStateException.class,
          () -> w.become("probe", probe.manifest(), ImageSource.store(dir.resolve("store"))), "a second BECOME");
      CompletableFuture<InvokeResult> slow = w.invoke(json("{\"op\": \"echo\"}"));
      slow.get();
    } finally {
      w.release();
    }
  }

  @Test
  void anImageThatDoesNotRestoreIsATypedErrorNamingIt() throws Exception {
    Worker w = pool.acquire(0, WAIT);
    seen.add(w.pid());
    try {
      WorkerException e = assertThrows(WorkerException.class,
          () -> w.becomeBlocking("nonsense", json("{\"schemaVersion\": 99}"), ImageSource.store(dir.resolve("store"))));
      assertEquals(WorkerErrorKind.IMAGE, e.kind(), e.toString());
      assertTrue(w.isAlive());
    } finally {
      w.release();
    }
  }

  @Test
  void aWorkerKilledMidRestoreFailsItsCallerAndIsReplaced() throws Exception {
    // Slow copies (the sim's bandwidth model) keep the restore running long enough to kill it inside.
    assumeTrue(probe.result() != null && isSim(), "needs the sim device's copy-speed model");
    Path store = dir.resolve("big-store");
    PoolTestImages.Built big = PoolTestImages.build(store, "big", PoolProbeFunction.class.getName(),
        "{\"bytes\": " + (64L << 20) + "}", null);
    List<Long> mine = new ArrayList<>();
    // A full restore (awaitResident): the BECOME itself lasts as long as the copies.
    ContextPool slow = ContextPool.create(PoolTesting.options(store).setAwaitResident(true)
        .setEnvironment(Map.of("THAW_SIM_COPY_GBPS", "0.02")));
    try {
      Worker w = slow.acquire(0, WAIT);
      mine.add(w.pid());
      CompletableFuture<BecomeResult> become = w.become("big", big.manifest(), ImageSource.store(store));
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (!w.status().get().state().equals("BECOMING") && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      assertEquals("BECOMING", w.status().get().state());
      ProcessHandle.of(w.pid()).orElseThrow().destroyForcibly();
      WorkerException e = assertThrows(WorkerException.class, () -> WorkerTesting.join(become));
      assertTrue(e instanceof WorkerLostException && e.kind() == WorkerErrorKind.CRASHED, e.toString());
      assertThrows(WorkerLostException.class, () -> WorkerTesting.join(w.resident()));
      assertTrue(e.getMessage().contains("signal 9"), e.getMessage());
      assertTrue(slow.awaitIdle(WAIT), slow.stats().toString());
      List<Long> now = slow.pids();
      mine.addAll(now);
      assertNotEquals(List.of(w.pid()), now);
      assertEquals(1, slow.stats().get(0).lost());
      assertTrue(slow.stats().get(0).lastFailure().contains("signal 9"));
    } finally {
      PoolTesting.closeAndCheck(slow, mine);
    }
  }

  @Test
  void aDeviceTooSmallForTheImageIsOutOfMemoryAtBecome() throws Exception {
    assumeTrue(isSim(), "needs the sim device's memory size setting");
    List<Long> mine = new ArrayList<>();
    // 4 MiB of device memory: the warm-up's 2 MiB fits, the image's 4 MiB + 2 MiB of buffer does not.
    Path store = dir.resolve("store4");
    PoolTestImages.Built big = PoolTestImages.build(store, "big4", PoolProbeFunction.class.getName(),
        "{\"bytes\": " + (5L << 20) + "}", null);
    ContextPool small = ContextPool.create(PoolTesting.options(store)
        .setEnvironment(Map.of("THAW_SIM_MEMORY", "4m")));
    try {
      Worker w = small.acquire(0, WAIT);
      mine.add(w.pid());
      WorkerException e = assertThrows(WorkerException.class,
          () -> w.becomeBlocking("big4", big.manifest(), ImageSource.store(store)));
      assertTrue(e instanceof WorkerOutOfMemoryException, e.toString());
      assertTrue(w.isAlive());
      assertNull(small.stats().get(0).lastFailure());
      w.release();
      awaitExit(w.pid());
    } finally {
      PoolTesting.closeAndCheck(small, mine);
    }
  }

  @Test
  void workersThatCannotStartAreReportedNotRespawnedInALoop() throws Exception {
    ContextPool broken = ContextPool.create(PoolTesting.options(dir.resolve("store"))
        .setJvmOptions(List.of("-XX:+ThisOptionDoesNotExist")));
    try {
      PoolExhaustedException e = assertThrows(PoolExhaustedException.class,
          () -> broken.acquire(0, Duration.ofSeconds(3)));
      assertTrue(e.getMessage().contains("ThisOptionDoesNotExist"), e.getMessage());
      PoolStats s = broken.stats().get(0);
      assertTrue(s.failedStarts() >= 1 && s.failedStarts() < 20 && s.started() == 0, s.toString());
    } finally {
      broken.close();
    }
    assertEquals(List.of(), broken.pids());
  }

  static boolean isSim() {
    return !"cuda".equalsIgnoreCase(System.getenv("THAW_DEVICE")) && !CudaDriver
        .availability().available();
  }
}
