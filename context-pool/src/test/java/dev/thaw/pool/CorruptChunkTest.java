package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins what a pooled worker does with a chunk whose bytes on disk no longer match its digest: the restore stops,
 * the caller gets a typed error naming the chunk, and no function serves from the damaged image.
 */
class CorruptChunkTest {

  @TempDir Path dir;

  @Test
  void aCorruptChunkStopsTheRestoreWithATypedErrorAndNothingServes() throws Exception {
    Path store = dir.resolve("store");
    PoolTestImages.Built probe = PoolTestImages.probe(store, "probe");
    Digest victim = ImageManifest.read(probe.manifest()).allocations().get(0).chunks().get(0).digest();
    PoolTestImages.corrupt(store, victim);
    List<Long> seen = new ArrayList<>();

    // A full restore: BECOME itself fails, naming the chunk; the worker lives and exits when released.
    ContextPool full = ContextPool.create(PoolTesting.options(store).setAwaitResident(true));
    try {
      Worker w = full.acquire(0, WAIT);
      seen.add(w.pid());
      WorkerException e = assertThrows(WorkerException.class,
          () -> w.becomeBlocking("probe", probe.manifest(), ImageSource.store(store)));
      assertTrue(e.kind() == WorkerErrorKind.CORRUPT_CHUNK || e.kind() == WorkerErrorKind.IMAGE, e.toString());
      assertTrue(e.getMessage().contains(victim.toString().substring(7, 20)) || e.getMessage().contains("damaged"),
          e.getMessage());
      assertThrows(IllegalStateException.class, () -> w.invoke(json("{\"op\": \"echo\"}")));
      w.release();
    } finally {
      PoolTesting.closeAndCheck(full, seen);
    }

    // On demand: the function may already be invocable when the stream reaches the chunk; then the worker ends.
    ContextPool onDemand = ContextPool.create(PoolTesting.options(store));
    try {
      Worker w = onDemand.acquire(0, WAIT);
      seen.add(w.pid());
      WorkerException e = null;
      try {
        w.becomeBlocking("probe", probe.manifest(), ImageSource.store(store));
      } catch (WorkerException thrown) {
        e = thrown;
      }
      if (e == null) {
        e = assertThrows(WorkerException.class, () -> WorkerTesting.join(w.resident()));
        PoolTesting.awaitExit(w.pid());
        assertTrue(!w.isAlive(), "a worker whose restore failed after it became invocable ends");
        assertThrows(WorkerException.class, () -> w.invokeBlocking(json("{\"op\": \"echo\"}")));
      } else {
        assertThrows(IllegalStateException.class, () -> w.invoke(json("{\"op\": \"echo\"}")));
      }
      assertTrue(e.kind() == WorkerErrorKind.CORRUPT_CHUNK || e.kind() == WorkerErrorKind.IMAGE, e.toString());
      w.release();
    } finally {
      PoolTesting.closeAndCheck(onDemand, seen);
    }
  }

  /** Flips one byte in the middle of the chunk's bytes wherever they lie in the store's files, as a disk would. */

}
