package dev.thaw.image.build;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.MemoryChunkStore;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.speculation.AccessProfile;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Pins what a build stores and commits, that its pipeline tiles memory exactly, and what bad input does. */
class ImageBuilderTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  static BuildOptions saxpy(String tag, int n) throws Exception {
    return new BuildOptions().setFunctionClass(SaxpyFunction.class.getName())
        .setConfig("{\"n\": " + n + ", \"seed\": 7}").setTag(tag).addSampleRequest(JSON.readTree("{\"a\": 2.5}"))
        // Small staging and chunks so that a small function still crosses segment and chunk boundaries.
        .setStagingBuffers(3).setStagingBytes(8192).setHashThreads(3);
  }

  @Test
  void buildStoresEveryAllocationAsChunksThatTileItAndCommitsTheManifest() throws Exception {
    MemoryChunkStore store = new MemoryChunkStore();
    AtomicLong progressed = new AtomicLong();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      BuildResult r = new ImageBuilder(store, new FixedSizeChunker(1000)).build(saxpy("saxpy:1", 5000), ctx,
          new ProgressListener() {
            @Override
            public void advance(long bytes) {
              progressed.addAndGet(bytes);
            }
          });
      assertEquals(0, driver.memoryInUse(), "the build's session is closed");

      ImageManifest m = Images.manifest(store, "saxpy:1");
      assertEquals(new String(r.manifest().toBytes()), new String(store.manifest("saxpy:1").orElseThrow()));
      assertEquals(List.of("x", "y", "out"), m.allocations().stream().map(ImageManifest.Allocation::name).toList());
      assertEquals(3 * 20000L, m.totalBytes());
      assertEquals(m.totalBytes(), progressed.get());
      for (ImageManifest.Allocation a : m.allocations()) {
        // 20000 bytes in 8192-byte segments of 1000-byte chunks: 8 + 1 chunks, twice, then 3 + 1.
        assertEquals(2 * 9 + 4, a.chunks().size(), a.name());
        assertEquals(192, a.chunks().get(8).length());
        for (ImageManifest.Chunk c : a.chunks()) {
          assertTrue(store.contains(c.digest()), c.digest().toString());
          ByteBuffer b = ByteBuffer.allocate(c.length());
          store.readChunk(c.digest(), b);
          assertEquals(c.digest(), Digest.of(b.flip()));
        }
      }
      ImageManifest.Module mod = m.modules().get(0);
      assertEquals("contract", mod.name());
      assertEquals("sm_90", mod.arch());
      assertTrue(store.contains(mod.cubin().digest()));
      ImageManifest.Kernel saxpy = mod.kernels().stream().filter(k -> k.name().equals("thaw_test_saxpy"))
          .findFirst().orElseThrow();
      assertEquals(4, saxpy.params().size(), saxpy.toString());
      assertEquals(SaxpyFunction.class.getName(), m.function().className());
      assertEquals(5000, m.function().config().get("n").asInt());
      assertEquals("Thaw simulated device", m.device().name());
      assertEquals("sim", m.device().driver());
      assertEquals("x", m.hostState().get("x").asText());
      assertEquals(r.sampleResponses().get(0).json().get("sum"), m.samples().get(0).response().get("sum"));
      // The sample request was the profiling invocation: saxpy read x and read-wrote out, inside its arguments.
      assertEquals("recorded", m.profile().orderSource());
      assertEquals(List.of("x", "out"), m.profile().firstAccessOrder());
      assertEquals(AccessProfile.Verdict.EXACT,
          m.profile().kernels().get("contract/thaw_test_saxpy").verdict());
      assertEquals("1 exact, 0 unsafe", m.profile().summary());
      assertEquals(m.chunkDigests().size(), m.build().chunkCount());
      assertTrue(r.timings().snapshotGBps() > 0, r.timings().toString());
      assertEquals(r.newBytes(), m.build().uniqueBytes(), "a first build stores every distinct chunk");
    }
  }

  @Test
  void aSecondBuildOfTheSameFunctionStoresNothingNew() throws Exception {
    MemoryChunkStore store = new MemoryChunkStore();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      ImageBuilder builder = new ImageBuilder(store, new FixedSizeChunker(4096));
      BuildResult first = builder.build(saxpy("a", 3000), ctx, ProgressListener.NONE);
      int chunks = store.chunkCount();
      BuildResult second = builder.build(saxpy("b", 3000), ctx, ProgressListener.NONE);
      assertTrue(first.newBytes() > 0);
      assertEquals(0, second.newBytes());
      assertEquals(chunks, store.chunkCount());
      assertEquals(List.of("a", "b"), store.tags());
    }
  }

  @Test
  void anInvalidTagIsRefusedBeforeAnythingRuns() {
    for (String bad : new String[] {"", " x", "-x", "a b", "x".repeat(200), null}) {
      assertThrows(IllegalArgumentException.class, () -> new BuildOptions().setTag(bad), String.valueOf(bad));
    }
    MemoryChunkStore store = new MemoryChunkStore();
    // No context: a build that got past validation would fail differently.
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> new ImageBuilder(store, new FixedSizeChunker()).build(
            new BuildOptions().setFunctionClass(SaxpyFunction.class.getName()), null, ProgressListener.NONE));
    assertTrue(e.getMessage().contains("not a tag"), e.getMessage());
  }

  @Test
  void anUnknownClassFailsInLoadAndCommitsNothing() {
    MemoryChunkStore store = new MemoryChunkStore();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      ImageBuildException e = assertThrows(ImageBuildException.class, () -> new ImageBuilder(store,
          new FixedSizeChunker()).build(new BuildOptions().setFunctionClass("no.such.Fn").setTag("t"), ctx,
          ProgressListener.NONE));
      assertEquals("load", e.phase());
      assertTrue(e.getMessage().contains("no function class no.such.Fn"), e.getMessage());
      assertTrue(store.tags().isEmpty());
    }
  }

  @Test
  void aFailingInitPropagatesWithContextAndCommitsNothing() throws Exception {
    MemoryChunkStore store = new MemoryChunkStore();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      BuildOptions o = saxpy("t", 10).setConfig("{\"n\": -1}");
      ImageBuildException e = assertThrows(ImageBuildException.class,
          () -> new ImageBuilder(store, new FixedSizeChunker()).build(o, ctx, ProgressListener.NONE));
      assertEquals("init", e.phase());
      assertInstanceOf(InvalidConfigException.class, e.getCause());
      assertTrue(e.getMessage().startsWith("init of " + SaxpyFunction.class.getName() + " failed: n must be"),
          e.getMessage());
      assertTrue(store.tags().isEmpty());
      assertEquals(0, store.chunkCount());
      assertEquals(0, driver.memoryInUse());
    }
  }

  @Test
  void aFailingSampleRequestNamesItself() throws Exception {
    MemoryChunkStore store = new MemoryChunkStore();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      BuildOptions o = saxpy("t", 10).addSampleRequest(JSON.readTree("{\"b\": 1}"));
      ImageBuildException e = assertThrows(ImageBuildException.class,
          () -> new ImageBuilder(store, new FixedSizeChunker()).build(o, ctx, ProgressListener.NONE));
      assertEquals("profile", e.phase());
      assertTrue(e.getMessage().startsWith("sample request 2 of 2"), e.getMessage());
      assertTrue(store.tags().isEmpty());
    }
  }

  @Test
  void aStoreErrorMidSnapshotCommitsNothingAndLeaksNoMemory() throws Exception {
    MemoryChunkStore store = new MemoryChunkStore();
    store.failPutsAfter(5);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      ImageBuildException e = assertThrows(ImageBuildException.class,
          () -> new ImageBuilder(store, new FixedSizeChunker(512)).build(saxpy("t", 5000), ctx,
              ProgressListener.NONE));
      assertEquals("snapshot", e.phase());
      assertTrue(e.getMessage().contains("store is full (test)"), e.getMessage());
      assertTrue(store.tags().isEmpty());
      assertEquals(0, driver.memoryInUse());
      // What it stored is unreachable, and garbage.
      assertEquals(store.chunkCount(), store.collectGarbage().chunks());
    }
  }

  @Test
  void optionsRoundTripThroughJsonAndRefuseBadValues() throws Exception {
    BuildOptions o = saxpy("fn:1", 8);
    BuildOptions back = BuildOptions.fromJson(o.toJson());
    assertEquals(o.toJson(), back.toJson());
    assertThrows(IllegalArgumentException.class, () -> new BuildOptions().setStagingBuffers(1));
    assertThrows(IllegalArgumentException.class, () -> new BuildOptions().setStagingBytes(100));
    assertThrows(IllegalArgumentException.class, () -> new BuildOptions().setHashThreads(0));
    IllegalArgumentException notObject = assertThrows(IllegalArgumentException.class,
        () -> new BuildOptions().setConfig("[1, 2]"));
    assertTrue(notObject.getMessage().contains("JSON object"), notObject.getMessage());
    assertThrows(IllegalArgumentException.class, () -> new BuildOptions().setConfig("{not json"));
    JsonNode cfg = new BuildOptions().setConfig("{\"n\": 3}").config();
    assertEquals(3, cfg.get("n").asInt());
  }

  @Test
  void fixedChunksCoverTheSegment() {
    FixedSizeChunker c = new FixedSizeChunker(10);
    assertEquals(List.of(10, 10, 5), Arrays.stream(c.cut(ByteBuffer.allocate(25))).boxed().toList());
    assertEquals(0, c.cut(ByteBuffer.allocate(0)).length);
  }
}
