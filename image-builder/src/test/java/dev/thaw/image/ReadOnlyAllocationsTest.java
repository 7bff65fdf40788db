package dev.thaw.image;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins what the profile says about writes, which decides what the HBM tier may share read-only: a build records
 * the buffers kernels stored to and the host uploaded to during the profiling invocations (not {@code init}'s
 * uploads); a manifest from before the field reads as "unknown", which makes nothing read-only.
 */
class ReadOnlyAllocationsTest {

  @TempDir
  Path dir;

  @Test
  void aBuildRecordsWhatTheInvocationsWroteAndTheRestIsReadOnly() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      BuildOptions o = new BuildOptions().setFunctionClass(SaxpyFunction.class.getName())
          .setConfig("{\"n\": 3000, \"seed\": 5}").setTag("saxpy")
          .addSampleRequest(new ObjectMapper().readTree("{\"a\": 2.0}"));
      BuildResult built = new ImageBuilder(store, new FixedSizeChunker(4096)).build(o, ctx, ProgressListener.NONE);
      ImageManifest m = built.manifest();
      assertEquals(List.of("out"), m.profile().writtenAllocations(), "the kernel wrote out; init's uploads don't count");
      assertEquals(Set.of("x", "y"), m.readOnlyAllocations());
      ImageManifest back = ImageManifest.read(m.toBytes());
      assertEquals(m.profile(), back.profile());
      assertEquals(Set.of("x", "y"), back.readOnlyAllocations());
    }
  }

  @Test
  void aManifestFromBeforeTheFieldReadsAsUnknownAndNothingIsReadOnly() throws Exception {
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(dir.resolve("store")));
        SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      BuildOptions o = new BuildOptions().setFunctionClass(SaxpyFunction.class.getName())
          .setConfig("{\"n\": 100, \"seed\": 5}").setTag("saxpy")
          .addSampleRequest(new ObjectMapper().readTree("{\"a\": 2.0}"));
      ImageManifest m = new ImageBuilder(store, new FixedSizeChunker(4096)).build(o, ctx, ProgressListener.NONE)
          .manifest();
      ObjectNode tree = (ObjectNode) new ObjectMapper().readTree(m.toBytes());
      ((ObjectNode) tree.get("profile")).remove("writtenAllocations");
      String old = tree.toString();
      assertFalse(old.contains("writtenAllocations"));
      ImageManifest read = ImageManifest.read(old.getBytes(StandardCharsets.UTF_8));
      assertNull(read.profile().writtenAllocations());
      assertTrue(read.readOnlyAllocations().isEmpty());
      assertFalse(new String(read.toBytes(), StandardCharsets.UTF_8).contains("writtenAllocations"),
          "unknown stays absent when written again");
    }
  }
}
