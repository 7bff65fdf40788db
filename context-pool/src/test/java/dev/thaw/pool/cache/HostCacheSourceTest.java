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
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.file.Path;
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
        BuildOptions o = new BuildOptions().setFunctionClass("dev.thaw.examples.mlp.MlpFunction").setConfig("{}")
            .setTag("mlp").addSampleRequest(request).setStagingBytes(1 << 16).setHashThreads(2);
        built = new ImageBuilder(store, new FixedSizeChunker(8192)).build(o, ctx, ProgressListener.NONE)
            .sampleResponses().get(0).json();
      }
      ImageManifest manifest = Images.manifest(store, "mlp");
      try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(8 << 20));
          CacheLease staged = cache.stage("mlp", manifest, store);
          SimDriver driver = SimDriver.open(new SimOptions().setCopyGBps(0.05));
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
}
