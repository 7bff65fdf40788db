package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.MemoryChunkStore;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.gpu.GpuStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Pins the full restore: across two sim drivers (two processes), device memory comes back byte for byte and the
 * function answers as it did at build; damaged or missing chunks stop it before any function runs, leaving
 * nothing mapped.
 */
class ImageRestorerTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int N = 6000;

  private MemoryChunkStore store;
  private BuildResult built;
  private JsonNode request;

  @BeforeEach
  void build() throws Exception {
    store = new MemoryChunkStore();
    request = JSON.readTree("{\"a\": 2.5}");
    BuildOptions o = new BuildOptions().setFunctionClass(SaxpyFunction.class.getName())
        .setConfig("{\"n\": " + N + ", \"seed\": 11}").setTag("saxpy").addSampleRequest(request)
        .setStagingBytes(8192).setHashThreads(2);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      built = new ImageBuilder(store, new FixedSizeChunker(1500)).build(o, ctx, ProgressListener.NONE);
    }
  }

  private static RestoreOptions small() {
    // Staging smaller than an allocation: several batches per allocation, slots reused.
    return new RestoreOptions().setStagingBuffers(2).setStagingBytes(4096).setReadThreads(3);
  }

  @Test
  void aRestoreInAnotherDriverHasTheSnapshotsBytesAndAnswersTheSame() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store, small()).restore("saxpy", ctx)) {
      for (ImageManifest.Allocation a : f.manifest().allocations()) {
        assertEquals(a.address(), f.session().address(new BufferRef(a.name())), a.name());
        assertArrayEquals(snapshotBytes(a), download(f.session(), a), "device bytes of " + a.name());
      }
      JsonNode again = f.invoke(FunctionRequest.of(request)).json();
      assertEquals(built.sampleResponses().get(0).json(), again);
      assertTrue(f.notes().isEmpty(), f.notes().toString());
      RestoreTimings t = f.timings();
      assertEquals(3L * 4 * N, t.bytes());
      assertTrue(t.totalMillis() >= t.copyMillis() && t.copyMillis() > 0 && t.mapMillis() >= 0
          && t.modulesMillis() > 0, t.toString());
    }
  }

  @Test
  void theRestoredMemoryIsWhatAFreshInitAndTheSampleRequestLeave() throws Exception {
    // An independent reference: the same function run directly, in a third driver, without Thaw's image.
    byte[][] expected = new byte[3][];
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession s = FunctionSession.record(ctx)) {
      SaxpyFunction fn = new SaxpyFunction();
      SaxpyFunction.State state = fn.init(s, JSON.readTree("{\"n\": " + N + ", \"seed\": 11}"));
      fn.invoke(s, state, FunctionRequest.of(request));
      for (int i = 0; i < 3; i++) {
        expected[i] = download(s, built.manifest().allocations().get(i));
      }
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store).restore("saxpy", ctx)) {
      for (int i = 0; i < 3; i++) {
        assertArrayEquals(expected[i], download(f.session(), f.manifest().allocations().get(i)));
      }
    }
  }

  @Test
  void aCorruptChunkIsNamedAndNothingStaysMapped() throws Exception {
    ImageManifest.Chunk victim = built.manifest().allocations().get(1).chunks().get(2);
    store.corrupt(victim.digest());
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      CorruptChunkException e = assertThrows(CorruptChunkException.class,
          () -> new ImageRestorer(store, small()).restore("saxpy", ctx));
      assertEquals(victim.digest(), e.digest());
      assertTrue(e.getMessage().contains(victim.digest().toString()) && e.getMessage().contains("allocation 'y'"),
          e.getMessage());
      assertEquals(0, driver.memoryInUse());
    }
  }

  @Test
  void noByteOfACorruptChunkIsCopiedToTheDevice() throws Exception {
    ImageManifest.Allocation y = built.manifest().allocations().get(1);
    ImageManifest.Chunk bad = y.chunks().get(y.chunks().size() - 1);
    store.corrupt(bad.digest());
    long badStart = y.address() + bad.offset();
    long badEnd = badStart + bad.length();
    List<long[]> copies = new CopyOnWriteArrayList<>();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      assertThrows(CorruptChunkException.class,
          () -> new ImageRestorer(store, small()).restore("saxpy", recordingCopies(ctx, copies)));
      assertEquals(0, driver.memoryInUse());
    }
    assertTrue(copies.size() > 0, "the chunks before the damaged one were copied");
    for (long[] c : copies) {
      assertTrue(c[0] + c[1] <= badStart || c[0] >= badEnd,
          String.format("a copy to [0x%x, +%d) covers the damaged chunk", c[0], c[1]));
    }
  }

  /** The context, with every host-to-device copy on its streams recorded as {address, bytes}. */
  private static GpuContext recordingCopies(GpuContext ctx, List<long[]> copies) {
    return (GpuContext) Proxy.newProxyInstance(GpuContext.class.getClassLoader(), new Class<?>[] {GpuContext.class},
        (proxy, method, args) -> {
          Object result = invoke(method, ctx, args);
          if (method.getName().equals("createStream")) {
            GpuStream real = (GpuStream) result;
            return Proxy.newProxyInstance(GpuStream.class.getClassLoader(), new Class<?>[] {GpuStream.class},
                (p, m, a) -> {
                  if (m.getName().equals("copyHostToDeviceAsync")) {
                    copies.add(new long[] {(Long) a[0], (Long) a[3]});
                  }
                  return invoke(m, real, a);
                });
          }
          return result;
        });
  }

  private static Object invoke(Method m, Object target, Object[] args) throws Throwable {
    try {
      return m.invoke(target, args);
    } catch (InvocationTargetException e) {
      throw e.getCause();
    }
  }

  @Test
  void aMissingChunkIsNamed() {
    Digest lost = built.manifest().allocations().get(2).chunks().get(0).digest();
    store.lose(lost);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      ChunkNotFoundException e = assertThrows(ChunkNotFoundException.class,
          () -> new ImageRestorer(store).restore("saxpy", ctx));
      assertEquals(lost, e.digest());
      assertEquals(0, driver.memoryInUse());
    }
  }

  @Test
  void anotherArchitectureLoadsThePtxAndAnotherNameIsNoted() throws Exception {
    SimOptions other = new SimOptions().setComputeCapability(8, 0).setDeviceName("Other simulated device");
    try (SimDriver driver = SimDriver.open(other); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store).restore("saxpy", ctx)) {
      assertEquals(2, f.notes().size(), f.notes().toString());
      assertTrue(f.notes().get(0).contains("built for sm_90, this device is sm_80"), f.notes().toString());
      assertTrue(f.notes().get(1).contains("Other simulated device"), f.notes().toString());
      assertEquals(built.sampleResponses().get(0).json(), f.invoke(FunctionRequest.of(request)).json());
    }
  }

  @Test
  void aSecondRestoreIntoTheSameProcessIsRefusedAndCleansUp() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> first = new ImageRestorer(store).restore("saxpy", ctx)) {
      long inUse = driver.memoryInUse();
      ImageRestoreException e = assertThrows(ImageRestoreException.class,
          () -> new ImageRestorer(store).restore("saxpy", ctx));
      assertTrue(e.getMessage().contains("device addresses"), e.getMessage());
      assertEquals(inUse, driver.memoryInUse());
    }
  }

  @Test
  void anUnknownTagIsNamed() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      ImageNotFoundException e = assertThrows(ImageNotFoundException.class,
          () -> new ImageRestorer(store).restore("nope", ctx));
      assertTrue(e.getMessage().contains("'nope'"));
    }
  }

  @Test
  void closingTwiceIsHarmlessAndFreesTheMemory() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      RestoredFunction<?> f = new ImageRestorer(store).restore("saxpy", ctx);
      assertTrue(driver.memoryInUse() > 0);
      f.close();
      f.close();
      assertEquals(0, driver.memoryInUse());
    }
  }

  private byte[] snapshotBytes(ImageManifest.Allocation a) {
    ByteBuffer all = ByteBuffer.allocate((int) a.size());
    for (ImageManifest.Chunk c : a.chunks()) {
      store.readChunk(c.digest(), all);
    }
    return all.array();
  }

  private static byte[] download(FunctionSession s, ImageManifest.Allocation a) {
    ByteBuffer b = ByteBuffer.allocateDirect((int) a.size());
    s.download(new BufferRef(a.name()), 0, b);
    byte[] out = new byte[(int) a.size()];
    b.get(0, out);
    return out;
  }
}
