package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins {@link ContextPoolOptions#warmupAfterReady()}: a worker is handed out as soon as it can serve, a request
 * that takes it cuts its warm-up short, and only a worker whose warm-up ran to its end counts as warm.
 */
class WarmupAfterReadyTest {

  @TempDir static Path dir;
  static PoolTestImages.Built probe;

  @BeforeAll
  static void build() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
  }

  @Test
  void aWaitingRequestCutsTheWarmupShortAndIsServed() throws Exception {
    // A warm-up of 2^31 launches would run for hours: a BECOME that is served at all was not kept waiting for it.
    Path logs = dir.resolve("logs-endless");
    ContextPoolOptions o = PoolTesting.options(dir.resolve("store")).setWarmupAfterReady(true)
        .setWarmupLaunches(Integer.MAX_VALUE).setLogDirectory(logs);
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(o);
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      WorkerStart start = w.start();
      assertTrue(start.phases().containsKey("context") && !start.phases().containsKey("warmup"),
          "READY came before the warm-up: " + start);
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertEquals(42, w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 42}")).jsonTree().get("echo").asInt());
      assertTrue(w.resident().get().storeBytes() > 0);
      assertTrue(log(logs, w.pid()).contains("warm-up cut short by a waiting request"), log(logs, w.pid()));
      // The next worker gets READY, idle, and is never warm: awaitIdle waits for warm ones only.
      long deadline = System.nanoTime() + WAIT.toNanos();
      while (pool.stats().get(0).idle() < 1 && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      assertEquals(1, pool.stats().get(0).idle(), pool.stats().toString());
      assertFalse(pool.awaitIdle(Duration.ofMillis(500)), "a worker still warming up does not count as warm");
      w.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aWarmupThatRunsToItsEndIsAnnouncedAndCounted() throws Exception {
    ContextPool pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setWarmupAfterReady(true));
    List<Long> seen = new ArrayList<>();
    try {
      assertTrue(pool.awaitIdle(WAIT), "the idle worker warms up and says so");
      Worker w = pool.acquire();
      seen.add(w.pid());
      WorkerStart start = w.start();
      assertTrue(start.phases().containsKey("warmup") && start.phases().containsKey("cpuWarmup")
          && start.phases().containsKey("context"), "the second READY's phases: " + start);
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertEquals(7, w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 7}")).jsonTree().get("echo").asInt());
      w.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  private static String log(Path logs, long pid) throws Exception {
    StringBuilder all = new StringBuilder();
    try (Stream<Path> files = Files.list(logs)) {
      for (Path f : files.toList()) {
        all.append(Files.readString(f));
      }
    }
    return all.toString();
  }
}
