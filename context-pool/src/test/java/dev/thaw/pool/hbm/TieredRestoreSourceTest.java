package dev.thaw.pool.hbm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestoreResources;
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
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.host.ProcessFds;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the restore source a worker hands on-demand restore: an image whose packed weights were left on the device
 * by the previous instance restores with the weights imported read-only and the one weight buffer that runs into a
 * written page restored like any other allocation, its fresh part only, on the restore's stream (a copy into the
 * imported part would be refused: it is mapped read-only); every device byte ends equal to the image's.
 */
class TieredRestoreSourceTest {

  private static final long MIB = 1L << 20;

  @TempDir
  Path dir;

  /** The function of the test image: no state, no kernels; the test reads the device itself. */
  public static final class Bytes implements ThawFunction<Bytes.State> {

    public record State() {}

    @Override
    public Class<State> stateType() {
      return State.class;
    }

    @Override
    public State init(FunctionSession session, JsonNode config) {
      return new State();
    }

    @Override
    public FunctionResponse invoke(FunctionSession session, State state, FunctionRequest request) {
      return FunctionResponse.of(JsonNodeFactory.instance.objectNode());
    }
  }

  @Test
  void residentWeightsAreSkippedAndTheBoundaryBufferIsRestoredOutsideTheImportedSlab() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        HostCacheView view = HostCacheView.attach(cache.path(), ctx);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16)) {
      // a0 (3 MiB + 100) and a1 (1 MiB) read-only, packed; a1 runs into the page a2 (written) starts on.
      ImageManifest built = TestImages.image(store, 21, 64 * 1024, List.of(), List.of("a2"), TestImages.BASE,
          3 * MIB + 100, MIB, 4096);
      ImageManifest m = new ImageManifest(built.schemaVersion(), new ImageManifest.Function(Bytes.class.getName(),
          JsonNodeFactory.instance.objectNode()), built.device(), built.allocations(), built.modules(),
          built.hostState(), built.samples(), built.build(), built.profile());
      assertEquals(Set.of("a0", "a1"), m.readOnlyAllocations());
      SessionTable table = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
      try (CacheLease lease = cache.stage("img", m, store)) {
        PinnedChunks chunks = view.chunks(lease.placement());
        List<ExportedSlab> held;
        try (FunctionSession first = FunctionSession.rebuild(ctx, table, m.readOnlyAllocations(),
            FunctionSession.SlabSource.EXPORTABLE_READ_ONLY); GpuStream s = ctx.createStream()) {
          CoalescedCopies.queue(CoalescedCopies.plan(RestoreOrder.allocations(m), chunks), s);
          s.synchronize();
          first.protectReadOnlySlabs();
          held = HbmExport.exportReadOnly(first);
        }
        assertEquals(1, held.size());
        ExportedSlab slab = held.get(0);
        assertEquals(TestImages.BASE + 4 * MIB, slab.address() + slab.size(), "a1 runs past the read-only slab");
        ResidentSlabs resident;
        try {
          resident = ResidentSlabs.take(ProcessFds.currentPid(), held);
        } finally {
          HbmExport.close(held);
        }
        TieredRestoreSource source = new TieredRestoreSource(chunks, resident);
        OnDemandRestore r;
        try (resident) {
          // As a worker does: the descriptors are closed once the restore has mapped them.
          r = new OnDemandRestorer(store).restore(m, ctx, source, resources,
              new OnDemandOptions().setSlabSource(resident));
        }
        try (r) {
          assertEquals(Set.of("a0"), resident.residentBuffers(), "a1 is only partly in the imported slab");
          RestoreSource.Lease l = source.lease(m);
          assertTrue(l.resident(m.allocations().get(0)));
          assertFalse(l.resident(m.allocations().get(1)), "restored as a unit of its own: its fresh part");
          assertFalse(l.resident(m.allocations().get(2)));
          assertEquals(List.of(slab.address() + ":" + (slab.address() + slab.size())),
              l.residentRanges().stream().map(x -> x[0] + ":" + x[1]).toList());
          r.awaitResident();
          OnDemandRestore.Stats stats = r.stats();
          long importedOfA1 = slab.address() + slab.size() - m.allocations().get(1).address();
          assertEquals(m.allocations().get(0).size() + importedOfA1, stats.residentBytes(), stats.toString());
          assertEquals(m.allocations().get(1).size() - importedOfA1 + 4096, stats.hostBytes(), stats.toString());
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

  @Test
  void withoutSlabsTheLeaseIsTheHostCacheAlone() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        HostCacheView view = HostCacheView.attach(cache.path(), ctx)) {
      ImageManifest m = TestImages.image(store, 22, 64 * 1024, List.of(), List.of("a1"), TestImages.BASE, MIB, 4096);
      try (CacheLease lease = cache.stage("img", m, store)) {
        RestoreSource.Lease l = new TieredRestoreSource(view.chunks(lease.placement()), null).lease(m);
        for (ImageManifest.Allocation a : m.allocations()) {
          assertFalse(l.resident(a));
          for (ImageManifest.Chunk c : a.chunks()) {
            assertNotNull(l.find(c.digest()), "cached: " + a.name() + " at " + c.offset());
          }
        }
        assertTrue(l.residentRanges().isEmpty());
      }
    }
  }
}
