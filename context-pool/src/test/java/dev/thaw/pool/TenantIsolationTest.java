package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static dev.thaw.pool.PoolTesting.awaitExit;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins tenant isolation between workers, on the device {@code THAW_DEVICE} picks (run it with {@code cuda} on the
 * GPU host: that is what proves the driver zeroes a previous tenant's memory). A first tenant fills its whole
 * mapped span — past the image's bytes up to the 2 MiB granularity — and more fresh memory with 0xAB, and its
 * worker exits; the next worker maps the same image at the same addresses and must read the image's bytes where
 * the image has them and zeros everywhere else; the same for one worker recycled between the tenants. And no worker
 * holds another worker's pipes.
 */
class TenantIsolationTest {

  @TempDir Path dir;

  @Test
  void aFreshWorkerNeverSeesAnEarlierTenantsDeviceBytes() throws Exception {
    // Profiled with a write to secret: its slab stays writable, so the first tenant can dirty it (a read-only one would
    // refuse the fill; SlabProtectionTest pins that).
    PoolTestImages.Built probe = PoolTestImages.build(dir.resolve("store"), "probe", PoolProbeFunction.class.getName(),
        "{}", "{\"op\": \"touch\"}");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setIdleTarget(1).setMaxWorkers(2)
        .setRecycleLimit(0));
    try {
      Worker first = pool.acquire(0, WAIT);
      seen.add(first.pid());
      // On a GPU, fill a gigabyte so the next tenant's physical pages very likely are this one's.
      long extra = first.start().simulated() ? 8L << 20 : 1L << 30;
      first.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      // The probe touches memory with raw context copies, which on-demand restore does not gate: let it land first.
      first.resident().get();
      JsonNode filled = first.invokeBlocking(json("{\"op\": \"fill\", \"value\": 171, \"extraBytes\": " + extra + "}"))
          .jsonTree();
      JsonNode dirty = first.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
      assertTrue(dirty.get("tailNonZero").asLong() == dirty.get("tailBytes").asLong()
          && dirty.get("headMismatches").asLong() > 0, "the first tenant's fill landed: " + dirty);
      first.release();
      awaitExit(first.pid());

      Worker next = pool.acquire(0, WAIT);
      seen.add(next.pid());
      next.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      next.resident().get();
      JsonNode scan = next.invokeBlocking(json("{\"op\": \"scan\", \"extraBytes\": " + extra + "}")).jsonTree();
      assertEquals(filled.get("address").asLong(), scan.get("address").asLong(), "same device address");
      assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes, not the first tenant's: " + scan);
      assertTrue(scan.get("tailBytes").asLong() > 0, scan.toString());
      assertEquals(0, scan.get("tailNonZero").asLong(), "the mapped tail the image never writes is zero: " + scan);
      assertEquals(0, scan.get("extraNonZero").asLong(), "fresh device memory is zero: " + scan);
      next.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  /**
   * The same on one worker that is recycled between the tenants: what the first tenant wrote in its mapped span is
   * zeroed before the span is released, so the next image mapped there, and fresh memory the next tenant allocates
   * (on a GPU very likely the first tenant's pages), read the image's bytes and zeros.
   */
  @Test
  void aRecycledWorkerNeverShowsTheNextTenantAnEarlierTenantsDeviceBytes() throws Exception {
    PoolTestImages.Built probe = PoolTestImages.build(dir.resolve("store"), "probe", PoolProbeFunction.class.getName(),
        "{}", "{\"op\": \"touch\"}");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setIdleTarget(1).setMaxWorkers(1));
    try {
      Worker first = pool.acquire(0, WAIT);
      seen.add(first.pid());
      first.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      first.resident().get();
      JsonNode filled = first.invokeBlocking(json("{\"op\": \"fill\", \"value\": 171}")).jsonTree();
      JsonNode dirty = first.invokeBlocking(json("{\"op\": \"scan\"}")).jsonTree();
      assertTrue(dirty.get("tailNonZero").asLong() == dirty.get("tailBytes").asLong()
          && dirty.get("headMismatches").asLong() > 0, "the first tenant's fill landed: " + dirty);
      first.release();

      Worker next = pool.acquire(0, WAIT);
      assertEquals(first.pid(), next.pid(), "the same worker, recycled");
      long extra = next.start().simulated() ? 8L << 20 : 1L << 30;
      next.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      next.resident().get();
      JsonNode scan = next.invokeBlocking(json("{\"op\": \"scan\", \"extraBytes\": " + extra + "}")).jsonTree();
      assertEquals(filled.get("address").asLong(), scan.get("address").asLong(), "same device address");
      assertEquals(0, scan.get("headMismatches").asLong(), "the image's bytes, not the first tenant's: " + scan);
      assertEquals(0, scan.get("tailNonZero").asLong(), "the mapped tail the image never writes is zero: " + scan);
      assertEquals(0, scan.get("extraNonZero").asLong(), "fresh device memory is zero: " + scan);
      next.release();
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  @Test
  void noWorkerHoldsAnotherWorkersPipes() throws Exception {
    Path fd = Path.of("/proc/self/fd");
    Assumptions.assumeTrue(Files.isDirectory(fd), "needs Linux /proc");
    List<Long> seen = new ArrayList<>();
    ContextPool pool = ContextPool.create(PoolTesting.options(null).setIdleTarget(3).setMaxWorkers(3)
        .setMaxStarting(3));
    try {
      assertTrue(pool.awaitIdle(WAIT), pool.stats().toString());
      List<Long> pids = pool.pids();
      seen.addAll(pids);
      assertEquals(3, pids.size());
      List<Set<String>> pipes = new ArrayList<>();
      for (long pid : pids) {
        Set<String> p = pipes(pid);
        assertTrue(p.size() >= 2, "worker " + pid + " has its stdin and stdout pipes: " + p);
        pipes.add(p);
      }
      for (int i = 0; i < pids.size(); i++) {
        for (int j = 0; j < pids.size(); j++) {
          if (i != j) {
            Set<String> shared = new HashSet<>(pipes.get(i));
            shared.retainAll(pipes.get(j));
            assertTrue(shared.isEmpty(), "workers " + pids.get(i) + " and " + pids.get(j) + " share " + shared);
          }
        }
        assertEquals(ProcessHandle.current().pid(),
            ProcessHandle.of(pids.get(i)).orElseThrow().parent().orElseThrow().pid(), "a child of the pool");
      }
      assertFalse(pipes.isEmpty());
    } finally {
      PoolTesting.closeAndCheck(pool, seen);
    }
  }

  /** The pipes a process has open, as {@code pipe:[inode]}. */
  private static Set<String> pipes(long pid) throws IOException {
    Set<String> out = new HashSet<>();
    try (Stream<Path> s = Files.list(Path.of("/proc", Long.toString(pid), "fd"))) {
      for (Path p : (Iterable<Path>) s::iterator) {
        try {
          String target = Files.readSymbolicLink(p).toString();
          if (target.startsWith("pipe:")) {
            out.add(target);
          }
        } catch (IOException e) {
          // Closed meanwhile.
        }
      }
    }
    return out;
  }
}
