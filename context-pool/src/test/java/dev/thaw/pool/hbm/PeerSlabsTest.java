package dev.thaw.pool.hbm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestoreResources;
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
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the node-wide HBM tier on two simulated devices that are peers: read-only slabs that device 1's instance left
 * (exported as its tier would take them) are mapped on device 0 at scratch addresses, and device 0's restore pulls
 * every allocation lying wholly in them over the peer link, the rest from the host cache; every device byte ends equal
 * to the image's. Through a link from device 1 they are mapped on device 1 alone and relayed through its ring; a link
 * from a device they do not lie on is refused. Devices that are not peers refuse the mapping with the device's error.
 */
class PeerSlabsTest {

  private static final long MIB = 1L << 20;

  @TempDir
  Path dir;

  @Test
  void anotherDevicesSlabsArePulledOverThePeerLinkAndTheRestComesFromTheHostCache() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2).setPeerGBps(2));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        HostCacheView view = HostCacheView.attach(cache.path(), zero);
        RestoreResources resources = RestoreResources.create(zero, 2, 1 << 16, 2, 1 << 16)) {
      ImageManifest m = image(store);
      SessionTable table = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
      try (CacheLease lease = cache.stage("img", m, store)) {
        PinnedChunks chunks = view.chunks(lease.placement());
        List<ExportedSlab> held = exportFrom(one, m, table, chunks);
        OnDemandRestore r;
        try (PeerSlabs peer = PeerSlabs.map(zero, held)) {
          HbmExport.close(held);
          assertEquals(1, peer.sourceDevice());
          assertEquals(held.get(0).size(), peer.bytes());
          ImageManifest.Allocation a0 = m.allocations().get(0);
          ImageManifest.Allocation a1 = m.allocations().get(1);
          assertTrue(peer.peerCopy(a0) != 0, "a0 lies wholly in the slab");
          assertEquals(0, peer.peerCopy(a1), "a1 runs into the written page: from the host cache");
          assertEquals(0, peer.peerCopy(m.allocations().get(2)));
          r = new OnDemandRestorer(store).restore(m, zero, peer.over(new TieredRestoreSource(chunks, null)),
              resources, new OnDemandOptions());
          r.awaitResident();
        }
        try (r) {
          assertA0PulledTheRestFromTheHost(r, m, zero);
        }
      }
    }
  }

  @Test
  void throughALinkFromTheirOwnDeviceTheSlabsAreMappedThereAloneAndRelayedThroughItsRing() throws Exception {
    HelperLink.Options ring = new HelperLink.Options().minFreeBytes(0).measureBytes(0).slots(2).slotBytes(MIB);
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(3).setPeerGBps(2));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        GpuContext two = driver.createContext(2);
        HostCacheView view = HostCacheView.attach(cache.path(), zero);
        RestoreResources resources = RestoreResources.create(zero, 2, 1 << 16, 2, 1 << 16);
        HelperLink fromOne = HelperLink.open(zero, one, ring); HelperLink fromTwo = HelperLink.open(zero, two, ring)) {
      ImageManifest m = image(store);
      SessionTable table = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
      try (CacheLease lease = cache.stage("img", m, store)) {
        PinnedChunks chunks = view.chunks(lease.placement());
        List<ExportedSlab> held = exportFrom(one, m, table, chunks);
        try {
          IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PeerSlabs.map(fromTwo, held));
          assertTrue(e.getMessage().contains("device 1"), e.getMessage());
          OnDemandRestore r;
          try (PeerSlabs peer = PeerSlabs.map(fromOne, held)) {
            assertEquals(1, peer.sourceDevice());
            assertEquals(fromOne, peer.link());
            long a0 = peer.peerCopy(m.allocations().get(0));
            assertTrue(a0 != 0, "a0 lies wholly in the slab");
            // Mapped for device 1 alone: device 0 reaches it only through device 1's ring.
            assertThrows(RuntimeException.class, () -> zero.copyDeviceToHost(ByteBuffer.allocateDirect(16), a0));
            r = new OnDemandRestorer(store).restore(m, zero, peer.over(new TieredRestoreSource(chunks, null)),
                resources, new OnDemandOptions());
            r.awaitResident();
          }
          try (r) {
            assertA0PulledTheRestFromTheHost(r, m, zero);
          }
        } finally {
          HbmExport.close(held);
        }
      }
    }
  }

  @Test
  void devicesThatAreNotPeersRefuseTheMappingAndLeaveNothingMapped() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(16 * MIB));
        SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(2).setPeerAccess(false));
        GpuContext zero = driver.createContext(0); GpuContext one = driver.createContext(1);
        HostCacheView view = HostCacheView.attach(cache.path(), zero)) {
      ImageManifest m = image(store);
      SessionTable table = new SessionTable(m.sessionTable(Map.of()).allocations(), List.of());
      try (CacheLease lease = cache.stage("img", m, store)) {
        List<ExportedSlab> held = exportFrom(one, m, table, view.chunks(lease.placement()));
        try {
          CudaException e = assertThrows(CudaException.class, () -> PeerSlabs.map(zero, held));
          assertEquals(CudaError.CUDA_ERROR_INVALID_DEVICE, e.code());
          // Nothing was left reserved: the image's own addresses and the whole scratch space are free.
          zero.reserveScratch(held.get(0).size()).close();
        } finally {
          HbmExport.close(held);
        }
      }
    }
  }

  /** a0 came over the peer link, the rest from the host cache, and every byte on {@code device} is the image's. */
  private static void assertA0PulledTheRestFromTheHost(OnDemandRestore r, ImageManifest m, GpuContext device) {
    OnDemandRestore.Stats stats = r.stats();
    assertEquals(m.allocations().get(0).size(), stats.peerBytes(), stats.toString());
    assertEquals(m.totalBytes() - stats.peerBytes(), stats.hostBytes(), stats.toString());
    assertEquals(Long.valueOf(stats.peerBytes()), r.linkBytes().get("peer"), r.linkBytes().toString());
    for (ImageManifest.Allocation a : m.allocations()) {
      for (ImageManifest.Chunk c : a.chunks()) {
        ByteBuffer b = ByteBuffer.allocateDirect(c.length());
        device.copyDeviceToHost(b, a.address() + c.offset());
        assertEquals(c.digest(), Digest.of(b), a.name() + " at " + c.offset());
      }
    }
  }

  /** a0 (3 MiB + 100) and a1 (1 MiB) read-only, packed; a1 runs into the page a2 (written) starts on. */
  private static ImageManifest image(RocksChunkStore store) throws Exception {
    ImageManifest built = TestImages.image(store, 23, 64 * 1024, List.of(), List.of("a2"), TestImages.BASE,
        3 * MIB + 100, MIB, 4096);
    return new ImageManifest(built.schemaVersion(), new ImageManifest.Function(
        TieredRestoreSourceTest.Bytes.class.getName(), JsonNodeFactory.instance.objectNode()), built.device(),
        built.allocations(), built.modules(), built.hostState(), built.samples(), built.build(), built.profile());
  }

  /**
   * What device 1's instance leaves its tier: the image restored there with exportable read-only slabs, protected and
   * exported; the instance then goes, freeing the image's addresses for device 0 (one process here, one each on a
   * node).
   */
  private static List<ExportedSlab> exportFrom(GpuContext one, ImageManifest m, SessionTable table,
      PinnedChunks chunks) {
    try (FunctionSession first = FunctionSession.rebuild(one, table, m.readOnlyAllocations(),
        FunctionSession.SlabSource.EXPORTABLE_READ_ONLY); GpuStream s = one.createStream()) {
      CoalescedCopies.queue(CoalescedCopies.plan(RestoreOrder.allocations(m), chunks), s);
      s.synchronize();
      first.protectReadOnlySlabs();
      List<ExportedSlab> held = HbmExport.exportReadOnly(first);
      assertEquals(1, held.size());
      return held;
    }
  }
}
