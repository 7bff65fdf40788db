package dev.thaw.pool;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/** Builds images into a real store for the pool's tests, on the device {@code THAW_DEVICE} picks. */
public final class PoolTestImages {

  private static final ObjectMapper JSON = new ObjectMapper();

  private PoolTestImages() {}

  /** An image built and committed; the store is closed again, so workers open it as its only readers. */
  public record Built(String tag, byte[] manifest, BuildResult result) {}

  public static Built build(Path store, String tag, String functionClass, String config, String sampleRequest)
      throws Exception {
    BuildOptions o = new BuildOptions().functionClass(functionClass).config(config).tag(tag);
    if (sampleRequest != null) {
      o.addSampleRequest(JSON.readTree(sampleRequest));
    }
    try (RocksChunkStore s = RocksChunkStore.open(store); GpuDriver driver = GpuDrivers.open();
        GpuContext ctx = driver.createContext(0)) {
      BuildResult r = new ImageBuilder(s, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE);
      return new Built(tag, s.manifest(tag).orElseThrow(), r);
    }
  }

  /** The probe function's image: one buffer {@code secret}. */
  public static Built probe(Path store, String tag) throws Exception {
    return build(store, tag, PoolProbeFunction.class.getName(), "{}", "{\"op\": \"echo\", \"value\": 1}");
  }

  public static byte[] json(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
