package dev.thaw.pool.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the host image cache as an on-demand restore's source: an MLP image staged into the shared arena, the arena
 * attached by a context as a worker does, and the restore copying every byte from it (none from the store), gated,
 * with the build's answer.
 */
class HostCacheSourceTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  Path dir;

  @Test
  void anOnDemandRestoreTakesEveryByteFromTheArenaAndAnswersAsTheBuildDid() throws Exception {
    JsonNode request = JSON.readTree("{\"inputs\": [[" + "0.5, -0.25, ".repeat(31) + "1.0, 2.0]]}");
    try (RocksChunkStore store = RocksChunkStore.open(dir.resolve("store"))) {
      JsonNode built;
      try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
        BuildOptions o = new BuildOptions().functionClass("dev.thaw.examples.mlp.MlpFunction").config("{}")
            .tag("mlp").addSampleRequest(request).stagingBytes(1 << 16).hashThreads(2);
        built = new ImageBuilder(store, new FixedSizeChunker(8192)).build(o, ctx, ProgressListener.NONE)
            .sampleResponses().get(0).json();
      }
      ImageManifest manifest = Images.manifest(store, "mlp");
      try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().capacityBytes(8 << 20));
          CacheLease staged = cache.stage("mlp", manifest, store);
          SimDriver driver = SimDriver.open(new SimOptions().copyGBps(0.05));
          GpuContext ctx = driver.createContext(0);
          HostCacheView view = HostCacheView.attach(cache.path(), ctx);
          RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16);
          OnDemandRestore r = new OnDemandRestorer(store).restore(manifest, ctx,
              HostCacheSource.of(view.chunks(ChunkPlacement.fromBytes(staged.placement().toBytes()))), resources,
              new OnDemandOptions())) {
        assertEquals(built, r.function().invoke(FunctionRequest.of(request)).json());
        r.awaitResident();
        OnDemandRestore.Stats s = r.stats();
        assertEquals(manifest.totalBytes(), s.hostBytes(), s.toString());
        assertEquals(0, s.storeBytes());
        // Chunks that lie back to back in the arena copy as one; a repeated chunk (the zeroed activations) is stored
        // once, so each of its uses is a copy of its own.
        long chunks = manifest.allocations().stream().mapToLong(a -> a.chunks().size()).sum();
        assertTrue(s.copies() < chunks, s.copies() + " copies for " + chunks + " chunks");
      }
    }
  }

  /**
   * GPT-2 (tiny-wide, seeded: zeroed biases, layer norms of ones, zeroed KV rows; 4 KiB chunks, so a few chunks
   * repeat many times) restored from the arena under both layouts. The restore thread alone, then the launches alone
   * (every allocation promoted by the launch that needs it): the restored bytes are the image's, the answer the
   * build's, and the copies are the placement's runs, which {@code RUNS} makes the device's runs.
   */
  @Test
  void aDedupHeavyImageRestoresInOneCopyPerRunOfTheDevice() throws Exception {
    String request = "{\"tokens\": [[5, 17, 3, 42, 8, 1, 66, 23]], \"maxNewTokens\": 1}";
    try (RocksChunkStore store = RocksChunkStore.open(dir.resolve("store"))) {
      JsonNode built;
      try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
        BuildOptions o = new BuildOptions().functionClass("dev.thaw.examples.gpt2.Gpt2Function")
            .config("{\"model\": \"tiny-wide\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 16}").tag("gpt2")
            .addSampleRequest(JSON.readTree(request)).stagingBytes(1 << 16).hashThreads(2);
        built = new ImageBuilder(store, new FixedSizeChunker(4096)).build(o, ctx, ProgressListener.NONE)
            .sampleResponses().get(0).json();
      }
      ImageManifest manifest = Images.manifest(store, "gpt2");
      Map<HostCacheOptions.Layout, int[]> copies = new HashMap<>();
      for (HostCacheOptions.Layout layout : HostCacheOptions.Layout.values()) {
        try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().capacityBytes(16 << 20)
            .layout(layout));
            CacheLease staged = cache.stage("gpt2", manifest, store);
            SimDriver driver = SimDriver.open(new SimOptions());
            GpuContext ctx = driver.createContext(0);
            HostCacheView view = HostCacheView.attach(cache.path(), ctx);
            RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16)) {
          ChunkPlacement placement = ChunkPlacement.fromBytes(staged.placement().toBytes());
          HostCacheSource source = HostCacheSource.of(view.chunks(placement));
          int runs = deviceRuns(placement);
          try (OnDemandRestore r = new OnDemandRestorer(store).restore(manifest, ctx, source, resources,
              new OnDemandOptions())) {
            r.awaitResident();
            assertImageBytes(ctx, manifest, manifest.allocations().stream().map(ImageManifest.Allocation::name)
                .collect(java.util.stream.Collectors.toSet()));
            OnDemandRestore.Stats s = r.stats();
            assertEquals(manifest.totalBytes(), s.hostBytes(), s.toString());
            assertEquals(runs, s.copies(), layout + ": the restore thread copies the placement's runs: " + s);
            if (layout == HostCacheOptions.Layout.RUNS) {
              assertEquals(s.copies(), s.runs(), "one copy, one event a run: " + s);
            }
            copies.put(layout, new int[] {s.copies(), 0});
          }
          try (OnDemandRestore r = new OnDemandRestorer(store).restore(manifest, ctx, source, resources,
              new OnDemandOptions().streamInBackground(false))) {
            assertEquals(built, r.function().invoke(FunctionRequest.of(JSON.readTree(request))).json());
            r.streamRest();
            r.awaitResident();
            assertImageBytes(ctx, manifest, manifest.readOnlyAllocations());
            OnDemandRestore.Stats s = r.stats();
            assertTrue(r.copyLog().stream().filter(OnDemandRestore.Copy::promoted).count() > 0, s.toString());
            copies.get(layout)[1] = s.copies();
          }
        }
      }
      int[] shared = copies.get(HostCacheOptions.Layout.SHARED);
      int[] runs = copies.get(HostCacheOptions.Layout.RUNS);
      int chains = deviceChains(manifest);
      assertEquals(chains, runs[0], "RUNS: one copy per run of allocations back to back on the device");
      // The tiny-wide image: the weights and the tokens after them, the positions, the cache rows, the activations,
      // the KV cache: five runs, five copies. Held once (SHARED), every use of a repeated chunk is a copy of its own.
      assertTrue(shared[0] >= 4 * runs[0], "SHARED: " + shared[0] + " copies against " + runs[0]);
      // A launch may need an allocation inside a run before the run's start (the tokens, which lie at the end of the
      // weights' run, before the embedding's weights): that splits the run once.
      assertTrue(runs[1] <= chains + 1, "promoted by launches: " + runs[1] + " copies for " + chains + " runs");
      assertTrue(shared[1] >= 4 * runs[1], "SHARED, promoted by launches: " + shared[1] + " against " + runs[1]);
    }
  }

  /** Copies a whole restore in entry order needs: a new one where an allocation chunk does not follow the last one. */
  private static int deviceRuns(ChunkPlacement placement) {
    int runs = 0;
    ChunkPlacement.Entry last = null;
    for (ChunkPlacement.Entry e : placement.entries()) {
      if (e.device() == ChunkPlacement.NO_DEVICE) {
        continue;
      }
      if (last == null || last.offset() + last.length() != e.offset() || last.device() + last.length() != e.device()) {
        runs++;
      }
      last = e;
    }
    return runs;
  }

  /**
   * The image's runs on the device as the restore thread meets them: from each allocation with bytes, in
   * first-access order, not met yet, through the allocations that start where the last one ends.
   */
  private static int deviceChains(ImageManifest manifest) {
    Map<Long, ImageManifest.Allocation> byAddress = new HashMap<>();
    manifest.allocations().forEach(a -> byAddress.put(a.address(), a));
    Set<String> met = new java.util.HashSet<>();
    int chains = 0;
    RestorePlan plan = RestorePlan.of(manifest);
    for (int u = 0; u < plan.unitCount(); u++) {
      ImageManifest.Allocation a = plan.unit(u);
      if (a.chunks().isEmpty() || met.contains(a.name())) {
        continue;
      }
      chains++;
      for (ImageManifest.Allocation b = a; b != null && !b.chunks().isEmpty() && met.add(b.name());
          b = byAddress.get(b.address() + b.size())) {
        // met
      }
    }
    return chains;
  }

  /** Every chunk of the named allocations is on the device, byte for byte. */
  private static void assertImageBytes(GpuContext ctx, ImageManifest manifest, Set<String> names) {
    for (ImageManifest.Allocation a : manifest.allocations()) {
      if (!names.contains(a.name())) {
        continue;
      }
      for (ImageManifest.Chunk c : a.chunks()) {
        ByteBuffer b = ByteBuffer.allocateDirect(c.length());
        ctx.copyDeviceToHost(b, a.address() + c.offset());
        assertEquals(c.digest(), Digest.of(b), a.name() + " at " + c.offset());
      }
    }
  }
}
