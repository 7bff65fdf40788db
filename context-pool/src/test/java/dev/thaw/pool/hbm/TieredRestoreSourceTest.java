package dev.thaw.pool.hbm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.CoalescedCopies;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.pool.cache.TestImages;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.host.ProcessFds;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the restore source a worker hands on-demand restore: an image whose packed weights were left on the device
 * by the previous instance restores with the weights imported read-only, the one weight buffer that runs into a
 * written page completed from the host cache, and every device byte equal to the image's.
 */
class TieredRestoreSourceTest {

  private static final long MIB = 1L << 20;

  @TempDir
  Path dir;

  @Test
  void residentWeightsAreSkippedAndABoundaryBufferIsCompletedFromTheCache() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().capacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        HostCacheView view = HostCacheView.attach(cache.path(), ctx)) {
      // a0 (3 MiB + 100) and a1 (1 MiB) read-only, packed; a1 runs into the page a2 (written) starts on.
      ImageManifest m = TestImages.image(store, 21, 64 * 1024, List.of(), List.of("a2"), TestImages.BASE,
          3 * MIB + 100, MIB, 4096);
      assertEquals(java.util.Set.of("a0", "a1"), m.readOnlyAllocations());
      SessionTable table = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
      try (CacheLease lease = cache.stage("img", m, store)) {
        PinnedChunks chunks = view.chunks(lease.placement());
        List<ExportedSlab> held;
        try (FunctionSession first = FunctionSession.rebuild(ctx, table, m.readOnlyAllocations(),
            FunctionSession.SlabSource.EXPORTABLE_READ_ONLY); GpuStream s = ctx.createStream()) {
          CoalescedCopies.queue(CoalescedCopies.plan(RestoreOrder.allocations(m), chunks), s);
          s.synchronize();
          held = HbmExport.exportReadOnly(first);
        }
        assertEquals(1, held.size());
        List<ExportedSlab> mine = new ArrayList<>();
        for (ExportedSlab e : held) {
          mine.add(e.withFd(ProcessFds.dup(e.fd())));
        }
        HbmExport.close(held);
        try (ResidentSlabs resident = new ResidentSlabs(mine);
            FunctionSession next = FunctionSession.rebuild(ctx, table, m.readOnlyAllocations(), resident)) {
          assertEquals(java.util.Set.of("a0"), resident.residentBuffers(), "a1 is only partly in the imported slab");
          RestoreSource.Lease l = new TieredRestoreSource(chunks, resident, ctx).lease(m);
          assertTrue(l.resident(m.allocations().get(0)));
          assertTrue(l.resident(m.allocations().get(1)), "completed from the cache, then resident");
          assertFalse(l.resident(m.allocations().get(2)));
          // What the restore does with the lease: copy what is not resident.
          ImageManifest.Allocation a2 = m.allocations().get(2);
          for (ImageManifest.Chunk c : a2.chunks()) {
            RestoreSource.HostChunk h = l.find(c.digest());
            assertNotNull(h);
            ctx.copyHostToDevice(a2.address() + c.offset(), h.buffer().slice(h.offset(), c.length()));
          }
          for (ImageManifest.Allocation a : m.allocations()) {
            for (ImageManifest.Chunk c : a.chunks()) {
              ByteBuffer b = ByteBuffer.allocateDirect(c.length());
              ctx.copyDeviceToHost(b, a.address() + c.offset());
              assertEquals(c.digest(), Digest.of(b), a.name() + " at " + c.offset());
            }
          }
        }
      }
    }
  }
}
