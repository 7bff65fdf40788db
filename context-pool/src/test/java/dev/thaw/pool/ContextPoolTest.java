package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static dev.thaw.pool.PoolTesting.alive;
import static dev.thaw.pool.PoolTesting.awaitExit;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the pool's contract with real worker processes and a real store, on the device {@code THAW_DEVICE} picks:
 * a worker becomes an image and serves from it; workers are never shared and never reused after an image; a
 * drained pool refills; close leaves no process behind.
 */
class ContextPoolTest {

  @TempDir static Path dir;
  static PoolTestImages.Built probe;

  @BeforeAll
  static void build() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
  }

  private static ContextPoolOptions options() {
    return PoolTesting.options(dir.resolve("store"));
  }

  @Test
  void aWorkerBecomesAnImageServesItAndIsReplacedAfterRelease() throws Exception {
    // One image per process (recycling off): WorkerRecycleTest pins the recycled worker.
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options().setRecycleLimit(0));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      WorkerStart start = w.start();
      assertTrue(start.spawnToReadyMillis() > 0 && start.phases().containsKey("context")
          && start.phases().containsKey("warmup") && start.phases().containsKey("jvm"), start.toString());
      assertEquals("BLANK", w.status().get().state());
      assertThrows(IllegalStateException.class, () -> w.restoreTimeline(8), "no restore to trace yet");

      long beforeBecome = System.nanoTime();
      BecomeResult b = w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertEquals(probe.result().manifest().totalBytes(), b.bytes());
      assertTrue(b.phases().containsKey("map allocations") && b.phases().containsKey("load modules"),
          b.phases().toString());
      double parts = b.phases().entrySet().stream().filter(e -> !e.getKey().equals("total"))
          .mapToDouble(Map.Entry::getValue).sum();
      assertTrue(parts <= b.phases().get("total") + 0.01, "the phases are disjoint: " + b.phases());
      RestoreCompletion done = w.resident().get();
      assertEquals(b.bytes(), done.storeBytes(), "every byte read from the store: " + done);

      InvokeResult r = w.invokeBlocking(json("{\"op\": \"echo\", \"value\": 42}"));
      JsonNode out = r.jsonTree();
      assertEquals(w.pid(), out.get("pid").asLong(), "the request ran in the worker's process");
      assertEquals(42, out.get("echo").asInt());
      assertTrue(r.phases().containsKey("invoke") && r.roundTripMillis() > 0, r.toString());
      JsonNode scan = w.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
      assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes are restored: " + scan);
      assertEquals(probe.result().manifest().allocations().get(0).address(), scan.get("address").asLong());

      // Its timeline, on this process's clock: the BECOME's phases, and its copies coalesced to the one span asked for.
      WorkerTimeline timeline = w.restoreTimeline(1).get();
      assertTrue(timeline.sharedClock(), "one monotonic clock for the processes of a Linux host");
      assertTrue(timeline.originNanos() >= beforeBecome && timeline.originNanos() <= beforeBecome
          + (long) (b.roundTripMillis() * 1e6), "the BECOME began after it was sent and before it answered");
      List<String> becomeRow = new ArrayList<>();
      long copySpans = 0;
      long copied = 0;
      for (JsonNode e : timeline.chromeTrace().get("traceEvents")) {
        if (e.path("tid").asInt() == 0 && e.path("ph").asText().equals("X")) {
          becomeRow.add(e.get("name").asText());
        }
        if (e.path("tid").asInt() == 2 && e.path("ph").asText().equals("X")) {
          copySpans++;
          copied += e.path("args").path("bytes").asLong();
        }
      }
      List<String> phases = new ArrayList<>(b.phases().keySet());
      phases.remove("total");
      phases.add(0, "BECOME probe");
      assertEquals(phases, becomeRow, "the BECOME's span, then its phases in order");
      assertEquals(1, copySpans, "capped at one span");
      assertEquals(b.bytes(), copied, "every byte copied, in that span");

      WorkerStatus status = w.status().get();
      assertEquals("READY", status.state());
      assertEquals("probe", status.image());
      assertEquals(2, status.invocations());

      long pid = w.pid();
      w.release();
      awaitExit(pid);
      assertTrue(!w.isAlive());
      assertThrows(IllegalStateException.class, () -> w.invoke(json("{\"op\": \"echo\"}")));
      assertTrue(pool.awaitIdle(WAIT), pool.stats().toString());
      seen.addAll(pool.pids());
      assertTrue(!pool.pids().contains(pid), "a worker that became an image is never handed out again");
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void workersAreNeverSharedAndAnExhaustedPoolSaysSo() throws Exception {
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options().setIdleTarget(2).setMaxWorkers(2).setMaxStarting(2));
    try {
      Worker a = pool.acquire(0, WAIT);
      Worker b = pool.acquire(0, WAIT);
      seen.add(a.pid());
      seen.add(b.pid());
      assertNotEquals(a.pid(), b.pid());
      PoolExhaustedException e = assertThrows(PoolExhaustedException.class, pool::acquire);
      assertTrue(e.getMessage().contains("2 in use"), e.getMessage());
      assertEquals(0, e.device());
      assertEquals(2, pool.stats().get(0).inUse());

      // A worker that never became an image is clean: it goes back and is handed out again.
      long blank = b.pid();
      b.release();
      Worker again = pool.acquire();
      assertEquals(blank, again.pid());
      assertThrows(IllegalArgumentException.class, () -> pool.acquire(7));
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aDrainedPoolRefillsWithFreshProcesses() throws Exception {
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options().setIdleTarget(2).setMaxWorkers(3).setMaxStarting(2)
        .setRecycleLimit(0));
    try {
      assertTrue(pool.awaitIdle(WAIT), pool.stats().toString());
      Set<Long> first = new HashSet<>(pool.pids());
      List<Worker> taken = List.of(pool.acquire(), pool.acquire());
      for (Worker w : taken) {
        seen.add(w.pid());
        w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      }
      for (Worker w : taken) {
        w.release();
      }
      for (Worker w : taken) {
        awaitExit(w.pid());
      }
      assertTrue(pool.awaitIdle(WAIT), pool.stats().toString());
      List<Long> now = pool.pids();
      seen.addAll(now);
      assertEquals(2, now.size(), now.toString());
      for (long pid : now) {
        assertTrue(!first.contains(pid) && alive(pid), "refilled with fresh processes: " + now + " vs " + first);
      }
      PoolStats s = pool.stats().get(0);
      assertTrue(s.started() >= 4 && s.inUse() == 0 && s.lost() == 0, s.toString());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void closeKillsWorkersHandedOutAndIdleAndIsIdempotent() throws Exception {
    ContextPool pool = ContextPool.create(options().setIdleTarget(1).setMaxWorkers(2));
    Worker held = pool.acquire(0, WAIT);
    assertTrue(pool.awaitIdle(WAIT));
    List<Long> pids = pool.pids();
    assertEquals(2, pids.size());
    pool.close();
    pool.close();
    for (long pid : pids) {
      assertTrue(!alive(pid), "worker " + pid + " outlived close()");
    }
    assertTrue(!held.isAlive());
    assertThrows(IllegalStateException.class, pool::acquire);
  }
}
