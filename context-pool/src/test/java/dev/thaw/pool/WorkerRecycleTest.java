package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static dev.thaw.pool.PoolTesting.awaitExit;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins recycling ({@link ContextPoolOptions#recycleLimit()}): a worker released after it became an image drops it and
 * becomes blank again, and becomes another image (or the same again) whose every byte it answers exactly as a fresh
 * worker does, on demand; its released memory was scrubbed; the limit ends it; and a worker that cannot drop its image
 * cleanly — memory left outside its session, a function that does not stop in time, killed meanwhile — is ended and
 * never handed out again.
 */
class WorkerRecycleTest {

  private static final String DIGEST = "{\"op\": \"digest\"}";
  private static final Pattern DROPPED = Pattern.compile("dropped '(\\w+)' \\((\\d+) image\\(s\\) so far\\): "
      + "([0-9.]+) MiB scrubbed");

  @TempDir static Path dir;
  private static Path store;
  private static PoolTestImages.Built a;
  private static PoolTestImages.Built b;

  @BeforeAll
  static void images() throws Exception {
    store = dir.resolve("store");
    // Different weights, different layouts: B's buffers lie where A's did and beyond.
    a = PoolTestImages.build(store, "a", WeightsProbeFunction.class.getName(),
        "{\"buffers\": 4, \"bytes\": 1048576, \"seed\": 1}", DIGEST);
    b = PoolTestImages.build(store, "b", WeightsProbeFunction.class.getName(),
        "{\"buffers\": 3, \"bytes\": 3145728, \"seed\": 2}", DIGEST);
  }

  private static ContextPoolOptions options(Path logs) {
    // One worker: every acquire after the first gets the recycled one, or a new one if it ended.
    return PoolTesting.options(store).setIdleTarget(1).setMaxWorkers(1).setLogDirectory(logs);
  }

  private static JsonNode digests(Worker w) {
    return w.invokeBlocking(json(DIGEST)).jsonTree();
  }

  private static JsonNode expected(PoolTestImages.Built image) {
    return image.result().sampleResponses().get(0).json();
  }

  @Test
  void aRecycledWorkerBecomesAnotherImageAndTheSameAgainAnsweringEveryByteAsAFreshOneDoes() throws Exception {
    Path logs = dir.resolve("logs-exact");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options(logs));
    try {
      Worker w = pool.acquire(0, WAIT);
      long pid = w.pid();
      seen.add(pid);
      w.becomeBlocking("a", a.manifest(), ImageSource.store(store));
      // Asked at once: the on-demand restore gates the reads until their bytes landed.
      assertEquals(expected(a), digests(w));
      w.release();

      for (PoolTestImages.Built next : List.of(b, a, b)) {
        Worker again = pool.acquire(0, WAIT);
        assertEquals(pid, again.pid(), "the recycled worker, not a new one");
        assertTrue(again.image() == null, "blank again");
        again.becomeBlocking(next.tag(), next.manifest(), ImageSource.store(store));
        assertEquals(expected(next), digests(again), "image " + next.tag() + " after another on one worker");
        again.resident().get(30, TimeUnit.SECONDS);
        again.release();
      }
      assertTrue(awaitIdle(pool, 1), pool.stats().toString());
      assertEquals(4, pool.stats().get(0).recycled(), pool.stats().toString());
      assertEquals(1, pool.stats().get(0).started(), "no worker but the first was started: " + pool.stats());

      // Each drop zeroed the image's slabs before releasing them (none was the HBM tier's here).
      List<String[]> drops = drops(logs);
      assertEquals(List.of("a", "b", "a", "b"), drops.stream().map(d -> d[0]).toList());
      for (int i = 0; i < drops.size(); i++) {
        PoolTestImages.Built image = drops.get(i)[0].equals("a") ? a : b;
        assertEquals(Integer.toString(i + 1), drops.get(i)[1]);
        double mib = Double.parseDouble(drops.get(i)[2]);
        assertTrue(mib * 1048576 >= image.result().manifest().totalBytes(), "scrubbed " + mib + " MiB of "
            + image.tag() + ", " + image.result().manifest().totalBytes() + " bytes");
      }
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void theRecycleLimitEndsAWorkerAfterThatManyDropsAndZeroMeansOneImagePerProcess() throws Exception {
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options(dir.resolve("logs-limit")).setRecycleLimit(1));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      w.becomeBlocking("a", a.manifest(), ImageSource.store(store));
      w.release();
      Worker again = pool.acquire(0, WAIT);
      assertEquals(w.pid(), again.pid());
      again.becomeBlocking("b", b.manifest(), ImageSource.store(store));
      assertEquals(expected(b), digests(again));
      again.release();
      awaitExit(again.pid());
      Worker fresh = pool.acquire(0, WAIT);
      seen.add(fresh.pid());
      assertNotEquals(w.pid(), fresh.pid(), "past the limit the worker exits");
      fresh.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }

    pool = ContextPool.create(options(dir.resolve("logs-zero")).setRecycleLimit(0));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      w.becomeBlocking("a", a.manifest(), ImageSource.store(store));
      w.release();
      awaitExit(w.pid());
      assertEquals(0, pool.stats().get(0).recycled());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aWorkerWhoseFunctionLeftDeviceMemoryOutsideItsSessionExitsAndIsNotReturned() throws Exception {
    // Profiled with a write to secret: its slab stays writable, so the fill below lands (TenantIsolationTest).
    PoolTestImages.Built probe = PoolTestImages.build(store, "probe", PoolProbeFunction.class.getName(), "{}",
        "{\"op\": \"touch\"}");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options(dir.resolve("logs-leak")));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(store));
      w.resident().get(30, TimeUnit.SECONDS);
      // A careless tenant: 4 MiB allocated on the context, not through its session, kept until the process exits.
      w.invokeBlocking(json("{\"op\": \"fill\", \"value\": 171, \"extraBytes\": 4194304}"));
      w.release();
      assertTrue(w.ended().get(30, TimeUnit.SECONDS).getMessage().contains("outside its session"),
          w.ended().get().getMessage());
      awaitExit(w.pid());
      Worker next = pool.acquire(0, WAIT);
      seen.add(next.pid());
      assertNotEquals(w.pid(), next.pid(), "never handed out again");
      next.release();
      assertEquals(0, pool.stats().get(0).recycled());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aFunctionThatDoesNotStopInTimeGetsItsWorkerKilledNotReturned() throws Exception {
    PoolTestImages.Built slow = PoolTestImages.build(store, "slow", SlowStopFunction.class.getName(),
        "{\"stopMillis\": 600000}", "{}");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options(dir.resolve("logs-slow"))
        .setRecycleTimeout(Duration.ofSeconds(2)));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      w.becomeBlocking("slow", slow.manifest(), ImageSource.store(store));
      // Served through its engine, which the drop then waits for.
      assertEquals(w.pid(), w.invokeBlocking(json("{}")).jsonTree().get("pid").asLong());
      w.release();
      WorkerException why = w.ended().get(30, TimeUnit.SECONDS);
      assertTrue(why.workerLost(), why.getMessage());
      awaitExit(w.pid());
      Worker next = pool.acquire(0, WAIT);
      seen.add(next.pid());
      assertNotEquals(w.pid(), next.pid());
      next.release();
      assertEquals(1, pool.stats().get(0).lost(), pool.stats().toString());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void aWorkerKilledWhileItDropsItsImageIsNoticedAndReplaced() throws Exception {
    PoolTestImages.Built slow = PoolTestImages.build(store, "slow3", SlowStopFunction.class.getName(),
        "{\"stopMillis\": 5000}", "{}");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(options(dir.resolve("logs-kill")));
    try {
      Worker w = pool.acquire(0, WAIT);
      seen.add(w.pid());
      w.becomeBlocking("slow3", slow.manifest(), ImageSource.store(store));
      w.invokeBlocking(json("{}"));
      w.release();
      // Its engine takes 5 s to stop: the drop is under way.
      Thread.sleep(500);
      assertFalse(w.ended().isDone(), "still dropping");
      ProcessHandle.of(w.pid()).orElseThrow().destroyForcibly();
      WorkerException why = w.ended().get(30, TimeUnit.SECONDS);
      assertTrue(why.workerLost(), why.getMessage());
      Worker next = pool.acquire(0, WAIT);
      seen.add(next.pid());
      assertNotEquals(w.pid(), next.pid());
      assertThrows(WorkerLostException.class, () -> w.become("a", a.manifest(), ImageSource.store(store)));
      next.release();
      assertEquals(0, pool.stats().get(0).recycled());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  private static boolean awaitIdle(ContextPool pool, int idle) throws InterruptedException {
    long until = System.nanoTime() + WAIT.toNanos();
    while (System.nanoTime() < until) {
      if (pool.stats().get(0).idle() >= idle) {
        return true;
      }
      Thread.sleep(10);
    }
    return false;
  }

  /** Each drop the workers' logs tell: image, images so far, MiB scrubbed; in the order they happened. */
  private static List<String[]> drops(Path logs) throws Exception {
    List<String[]> out = new ArrayList<>();
    try (Stream<Path> files = Files.list(logs)) {
      for (Path f : files.sorted().toList()) {
        Matcher m = DROPPED.matcher(Files.readString(f));
        while (m.find()) {
          out.add(new String[] {m.group(1), m.group(2), m.group(3)});
        }
      }
    }
    return out;
  }
}
