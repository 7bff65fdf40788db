package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmTier;
import dev.thaw.pool.hbm.HbmTierOptions;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the pooled worker's multi-link restore and the node-wide HBM tier with real worker processes on two simulated
 * devices that are peers (a modelled 1 GB/s peer link), with slow host copies so that a restore spans several runs: a
 * worker opens a link to the other device as it warms up (its READY says so), restores the host cache's bytes through
 * it as well as its own when the BECOME names that device, and lands every byte (the function's digests of its
 * weights, read through gated downloads, are the build's); a worker becomes an image whose read-only slabs the other
 * device's HBM tier holds by pulling them over the peer link through its link's ring ({@code hbm-peer}), every byte
 * again the build's. With
 * {@code THAW_DEVICE=cuda} the same on two GPUs ({@code scripts/gpu/multilink-run.sh} runs it there).
 */
class MultiLinkWorkerTest {

  /** The sim device in CI; {@code THAW_DEVICE=cuda} on a host with two GPUs. */
  private static final String DEVICE = System.getenv().getOrDefault("THAW_DEVICE", "sim");
  private static final String CONFIG = "{\"buffers\": 6, \"bytes\": 3145728, \"seed\": 9}";
  private static final String DIGEST = "{\"op\": \"digest\"}";

  @TempDir Path dir;
  private Path storePath;
  private PoolTestImages.Built image;

  @BeforeEach
  void build() throws Exception {
    storePath = dir.resolve("store");
    image = PoolTestImages.build(storePath, "weights", WeightsProbeFunction.class.getName(), CONFIG, DIGEST);
  }

  /**
   * Workers on devices 0 and 1: on the sim device (the default) two simulated devices with slow host copies and a
   * modelled peer link; with {@code THAW_DEVICE=cuda} two GPUs, the test skipped saying so where there are fewer.
   */
  private ContextPoolOptions twoDevices(HostImageCache cache) {
    ContextPoolOptions o = PoolTesting.options(storePath).setDevices(List.of(0, 1)).setDeviceChoice(DEVICE)
        .setWarmupLaunches(0).setHostCachePath(cache.path()).setHelperSlotBytes(1 << 20).setHelperMinFreeBytes(0);
    if (DEVICE.equals("sim")) {
      return o.setEnvironment(Map.of("THAW_SIM_DEVICES", "2", "THAW_SIM_COPY_GBPS", "0.05",
          "THAW_SIM_PEER_GBPS", "1"));
    }
    try (GpuDriver driver = GpuDrivers.open()) {
      assumeTrue(driver.devices().size() >= 2, "needs two GPUs; this host has " + driver.devices().size());
    }
    return o;
  }

  private JsonNode built() {
    return image.result().sampleResponses().get(0).json();
  }

  @Test
  void aWorkerRestoresThroughTheOtherDevicesLinkAsWellAsItsOwnAndLandsEveryByte() throws Exception {
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
      ContextPool pool = ContextPool.create(twoDevices(cache));
      try {
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        assertEquals(List.of(1), w.helperLinks(), "a warm worker holds a link to the other device");
        assertTrue(w.start().phases().containsKey("helperLinks"), w.start().toString());
        CacheLease lease = cache.stage("weights", ImageManifest.read(image.manifest()), store);
        // Device 3 does not exist on this node: a BECOME that names it restores through the links there are.
        BecomeResult b = w.becomeBlocking("weights", image.manifest(),
            ImageSource.hostCache(lease, storePath).withHelpers(List.of(1, 3), 1.0));
        assertEquals("cache", b.source(), b.toString());
        assertEquals(List.of(1), b.helpers(), b.toString());
        assertEquals(built(), w.invokeBlocking(json(DIGEST)).jsonTree(), "every weight's bytes are the build's");
        RestoreCompletion done = w.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        assertEquals(image.result().manifest().totalBytes(), done.hostBytes(), done.toString());
        assertTrue(done.helperBytes() > 0 && done.helperBytes() < done.hostBytes(),
            "both links carried part of it: " + done);
        assertEquals(built(), w.invokeBlocking(json(DIGEST)).jsonTree());
        w.release();

        // Without helpers named, a worker restores through its own link alone.
        Worker alone = pool.acquire(0, WAIT);
        seen.add(alone.pid());
        BecomeResult single = alone.becomeBlocking("weights", image.manifest(),
            ImageSource.hostCache(cache.stage("weights", ImageManifest.read(image.manifest()), store), storePath));
        assertEquals(List.of(), single.helpers());
        assertEquals(built(), alone.invokeBlocking(json(DIGEST)).jsonTree());
        assertEquals(0, alone.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS).helperBytes());
        alone.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }

  @Test
  void aWorkerPullsTheWeightsTheOtherDevicesHbmTierHoldsOverThePeerLink() throws Exception {
    List<Long> seen = new ArrayList<>();
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(64L << 20));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true));
        HbmTier deviceOne = new HbmTier(new HbmTierOptions())) {
      ImageManifest manifest = ImageManifest.read(image.manifest());
      ContextPool pool = ContextPool.create(twoDevices(cache));
      try {
        // An instance on device 1 scales in: its read-only slabs stay in device 1's tier.
        Worker first = pool.acquire(1, WAIT);
        seen.add(first.pid());
        // No request: a download through the session before the slabs are protected would keep them from the tier.
        first.becomeBlocking("weights", image.manifest(),
            ImageSource.hostCache(cache.stage("weights", manifest, store), storePath).withResident(List.of()));
        first.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        List<ExportedSlab> slabs = first.exportReadOnly().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        assertTrue(deviceOne.offer("weights", first.pid(), slabs), slabs.toString());
        // The tier holds them now: the worker, recycled, must leave them as they are (the digests below read them).
        first.exportKept();
        first.release();

        // The next start is on device 0: the weights come over the peer link from device 1's memory, mapped on device 1
        // alone and relayed through the ring of the worker's link from there.
        Worker w = pool.acquire(0, WAIT);
        seen.add(w.pid());
        assertEquals(List.of(1), w.helperLinks(), "a warm worker holds a link to the other device");
        List<ExportedSlab> held = deviceOne.slabs("weights").orElseThrow();
        BecomeResult b = w.becomeBlocking("weights", image.manifest(), ImageSource.hostCache(
            cache.stage("weights", manifest, store), storePath).withResident(List.of()).withPeer(1, held));
        assertEquals("hbm-peer", b.source(), b.toString());
        assertEquals(List.of(1), b.helpers(), "device 1 relays its memory: " + b);
        assertTrue(b.phases().containsKey("peer take"), b.phases().toString());
        assertEquals(built(), w.invokeBlocking(json(DIGEST)).jsonTree(), "every weight's bytes are the build's");
        RestoreCompletion done = w.resident().get(WAIT.toSeconds(), TimeUnit.SECONDS);
        assertTrue(done.peerBytes() > 0, done.toString());
        assertEquals(done.bytes(), done.peerBytes() + done.hostBytes(), "the rest from the host cache: " + done);
        w.release();
      } finally {
        PoolTesting.closeAndCheck(pool, seen);
      }
    }
  }
}
