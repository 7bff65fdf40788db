package dev.thaw.image.registry;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.ImageRestorer;
import dev.thaw.image.restore.RestoreCheck;
import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

/** Small real images (the saxpy test function, built on the sim device) for the registry tests. */
final class TestImages {

  static final String REQUEST = "{\"a\": 2.5}";

  private TestImages() {}

  /** Builds saxpy of {@code n} elements with {@code seed} under {@code tag}, cut into 1500-byte chunks. */
  static ImageManifest build(ChunkStore store, String tag, int n, int seed) throws Exception {
    BuildOptions o = new BuildOptions().setFunctionClass(SaxpyFunction.class.getName())
        .setConfig("{\"n\": " + n + ", \"seed\": " + seed + "}").setTag(tag)
        .addSampleRequest(new ObjectMapper().readTree(REQUEST)).setStagingBytes(8192).setHashThreads(2);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      return new ImageBuilder(store, new FixedSizeChunker(1500)).build(o, ctx, ProgressListener.NONE).manifest();
    }
  }

  /**
   * Restores {@code tag} from {@code store} into a fresh sim driver and checks it: device memory byte-identical
   * to the image, and the sample request answered as at build. Returns the check's chunk count.
   */
  static int restoreAndCheck(ChunkStore store, String tag) throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store).restore(tag, ctx)) {
      RestoreCheck.Result memory = RestoreCheck.deviceMemory(f);
      if (!memory.identical()) {
        throw new AssertionError("restored memory differs: " + memory.mismatches());
      }
      var request = new ObjectMapper().readTree(REQUEST);
      var recorded = RestoreCheck.buildResponse(f.manifest(), request).orElseThrow();
      if (!RestoreCheck.sameJson(recorded, f.invoke(FunctionRequest.of(request)).json())) {
        throw new AssertionError("the restored function answers differently from the build");
      }
      return memory.chunks();
    }
  }

  /** Every chunk of {@code tag}'s image with its bytes, read from {@code store}. */
  static Map<Digest, byte[]> chunks(ChunkStore store, String tag) {
    Map<Digest, byte[]> out = new HashMap<>();
    for (ThawArtifact.ChunkRef c : ThawArtifact.pullOrder(Images.manifest(store, tag))) {
      byte[] b = new byte[c.length()];
      store.readChunk(c.digest(), ByteBuffer.wrap(b));
      out.put(c.digest(), b);
    }
    return out;
  }
}
