package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.probe.MemoryProbeFunction;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.speculation.AccessSet;
import dev.thaw.runtime.speculation.AccessSpeculator;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Pins the write protection of read-only slabs on the sim device, against the real store: the memory probe's image
 * (its {@code values} buffer only read by its profiled request, so read-only, on a 2 MiB page of its own) restored on
 * demand (from the host cache and from the store, with copies slow enough to lag the first request) and whole. The
 * restore never protects a slab on its own: its owner does, with {@link OnDemandRestore#protectReadOnlySlabs} while
 * the function is idle, and that refuses while any copy is outstanding (the sim device faults a mapping made
 * read-only under work in flight, so a protection at the wrong moment poisons it). A normal request is answered
 * throughout, a store into a read-write buffer still succeeds, and once protected a kernel store into {@code values}
 * faults with a sticky {@code CUDA_ERROR_ILLEGAL_ADDRESS} without changing a byte.
 */
class SlabProtectionTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  /** 2 MiB of floats: {@code values} fills the first page exactly, {@code out} starts the next. */
  static final int ELEMENTS = 1 << 19;
  static final String CONFIG = "{\"elements\": " + ELEMENTS + ", \"maxCount\": 16}";
  static final String READ = "{\"offset\": 1000, \"count\": 4}";
  /** Stores into {@code values}: the image's read-only weights. */
  static final String WRITE_WEIGHTS = "{\"offset\": 1000, \"count\": 4, \"fill\": -7.5}";
  /** Stores into {@code out}, which follows {@code values}: read-write. */
  static final String WRITE_OUT = "{\"offset\": " + ELEMENTS + ", \"count\": 4, \"fill\": 3.25}";
  /** Slow enough that the restore lags the first request: ~100 ms for the image. */
  private static final double COPY_GBPS = 0.04;

  @TempDir
  static Path dir;
  private static RocksChunkStore store;

  @BeforeAll
  static void build() throws Exception {
    store = RocksChunkStore.open(dir.resolve("store"));
    BuildOptions o = new BuildOptions().setFunctionClass(MemoryProbeFunction.class.getName()).setConfig(CONFIG)
        .setTag("probe").addSampleRequest(JSON.readTree(READ)).setStagingBytes(1 << 20).setHashThreads(2);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      new ImageBuilder(store, new FixedSizeChunker(64 << 10)).build(o, ctx, ProgressListener.NONE);
    }
  }

  @AfterAll
  static void closeStore() {
    store.close();
  }

  @Test
  void theProbesWeightsAreReadOnlyOnAPageOfTheirOwn() {
    ImageManifest m = Images.manifest(store, "probe");
    assertEquals(Set.of("values"), m.readOnlyAllocations());
  }

  @ParameterizedTest(name = "from the host cache: {0}")
  @ValueSource(booleans = {true, false})
  void onDemandTheReadOnlySlabIsProtectedOnceFilledAndAWriteToItFaults(boolean hostCache) throws Exception {
    ImageManifest m = Images.manifest(store, "probe");
    List<String> faults = new CopyOnWriteArrayList<>();
    try (SimDriver driver = SimDriver.open(new SimOptions().setCopyGBps(COPY_GBPS));
        GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16);
        PinnedImageSource cache = hostCache ? PinnedImageSource.load(RestorePlan.of(m), store, ctx, 2) : null) {
      ((SimContext) ctx).addLaunchListener(l -> l.fault().ifPresent(f -> faults.add(l.kernelName() + ": "
          + f.getMessage() + "; bytes written " + l.writes().totalBytes())));
      OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx,
          cache == null ? RestoreSource.STORE_ONLY : cache, resources, new OnDemandOptions());
      try {
        FunctionSession.MappedSlab weights = readOnlySlab(r.function().session());
        assertEquals(MemoryAccess.READ_WRITE, weights.mapping().access(), "nothing protected before its copies");
        // The first request runs while the copies stream in.
        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
        r.awaitResident();
        assertEquals(MemoryAccess.READ_WRITE, weights.mapping().access(), "the restore never protects on its own");
        assertEquals(0, r.protection().slabs());
        // Idle: the request returned, and every copy has landed.
        assertTrue(r.protectReadOnlySlabs());
        assertEquals(MemoryAccess.READ, weights.mapping().access());
        OnDemandRestore.Protection p = r.protection();
        assertEquals(new OnDemandRestore.Protection(1, 1, 2L << 20, p.millis(), null), p);
        assertTrue(r.protectReadOnlySlabs(), "once protected, a later call returns at once");
        System.out.printf("on-demand restore from the %s (sim device): protected %d read-only slab of %d MiB in "
            + "%.3f ms while idle%n", hostCache ? "host cache" : "store", p.slabs(), p.bytes() >> 20, p.millis());

        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(WRITE_OUT))).json(), 3.25, 3.25, 3.25,
            3.25);
        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
        assertTrue(faults.isEmpty(), faults.toString());

        CudaException e = assertThrows(CudaException.class,
            () -> r.function().invoke(FunctionRequest.of(JSON.readTree(WRITE_WEIGHTS))));
        assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code(), e.getMessage());
        assertEquals(1, faults.size(), faults.toString());
        assertTrue(faults.get(0).contains("probe_write") && faults.get(0).contains("mapped read-only"), faults.get(0));
        assertTrue(faults.get(0).endsWith("bytes written 0"), "the faulting kernel wrote nothing: " + faults.get(0));
        // Sticky: the device is poisoned for good, as a CUDA process is.
        assertThrows(CudaException.class, () -> r.function().invoke(FunctionRequest.of(JSON.readTree(READ))));
      } finally {
        closeQuietly(r);
      }
    }
  }

  @Test
  void aSlabIsNotProtectedWhileACopyIntoItIsStillToCome() throws Exception {
    ImageManifest m = Images.manifest(store, "probe");
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16);
        OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources,
            new OnDemandOptions().setStreamInBackground(false))) {
      FunctionSession.MappedSlab weights = readOnlySlab(r.function().session());
      Thread.sleep(50);
      assertFalse(r.isResident());
      assertFalse(r.protectReadOnlySlabs(), "copies are still to come: not now");
      assertEquals(MemoryAccess.READ_WRITE, weights.mapping().access(), "values is not restored yet");
      assertEquals(0, r.protection().slabs());
      r.streamRest();
      r.awaitResident();
      assertTrue(r.protectReadOnlySlabs());
      assertEquals(MemoryAccess.READ, weights.mapping().access());
      assertEquals(1, r.protection().slabs());
      assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
    }
  }

  /**
   * The restore window: with nothing streamed before a launch asks for it, the first request's launch is queued while
   * the read-only slab is still writable. A store into it may land before the protection does; either way the slab is named as perhaps written (the launch pointed into it through a slot the kernel's PTX
   * stores through), so it is never handed on. So is it for a store into {@code out} made through the pointer to
   * {@code values} ({@code probe_write(values, elements + i)}): where such a store lands depends on the offset, which
   * no analysis sees. A read names nothing.
   */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {READ, WRITE_OUT, WRITE_WEIGHTS})
  void aLaunchThatMayStoreIntoAStillWritableSlabNamesIt(String request) throws Exception {
    ImageManifest m = Images.manifest(store, "probe");
    try (SimDriver driver = SimDriver.open(new SimOptions().setCopyGBps(COPY_GBPS));
        GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16)) {
      OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources,
          new OnDemandOptions().setStreamInBackground(false));
      try {
        long slab = readOnlySlab(r.function().session()).slab().address();
        String outcome;
        try {
          outcome = r.function().invoke(FunctionRequest.of(JSON.readTree(request))).json().get("values").toString();
        } catch (CudaException e) {
          outcome = e.errorName();
        }
        System.out.printf("in the restore window (sim device): %s -> %s; may have been written: %s%n", request, outcome,
            r.mayHaveBeenWritten());
        assertEquals(request.equals(READ) ? List.of() : List.of(slab), r.mayHaveBeenWritten());
      } finally {
        closeQuietly(r);
      }
    }
  }

  /**
   * Between full residency and the protection (the rest of the first request, and any request before an idle point
   * finds the restore resident) a slab is still writable: a store into it lands, and the gate still names it, so it
   * is never handed on. After the protection the same store faults.
   */
  @Test
  void aStoreAfterResidencyButBeforeTheProtectionLandsAndIsNamed() throws Exception {
    ImageManifest m = Images.manifest(store, "probe");
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16)) {
      OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources,
          new OnDemandOptions());
      try {
        r.awaitResident();
        long slab = readOnlySlab(r.function().session()).slab().address();
        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
        assertEquals(List.of(), r.mayHaveBeenWritten(), "a read names nothing");
        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(WRITE_WEIGHTS))).json(), -7.5, -7.5, -7.5,
            -7.5);
        assertEquals(List.of(slab), r.mayHaveBeenWritten());
        assertTrue(r.protectReadOnlySlabs());
        CudaException e = assertThrows(CudaException.class,
            () -> r.function().invoke(FunctionRequest.of(JSON.readTree(WRITE_WEIGHTS))));
        assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code(), e.getMessage());
      } finally {
        closeQuietly(r);
      }
    }
  }

  /**
   * The protection waits for the context's work: with the function's last request still running on the device (a
   * launch held by a listener on the stream's worker), {@code protectReadOnlySlabs} synchronizes first and only then
   * narrows the mapping, so nothing faults (the sim device would poison itself had it narrowed under the work).
   */
  @Test
  void theProtectionWaitsForWorkStillOnTheDevice() throws Exception {
    ImageManifest m = Images.manifest(store, "probe");
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16)) {
      OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources,
          new OnDemandOptions());
      try {
        r.awaitResident();
        CountDownLatch running = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        ((SimContext) ctx).addLaunchListener(l -> {
          running.countDown();
          try {
            release.await();
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        });
        FunctionSession session = r.function().session();
        KernelRef read = session.kernelRef("probe", "probe_read");
        long values = readOnlySlab(session).slab().address();
        // Queued, not waited for: the device holds it until released.
        session.launch(read, Dim3.of(1), Dim3.of(32),
            new BufferRef("values"), 0L, 4, new BufferRef("out"));
        assertTrue(running.await(30, TimeUnit.SECONDS));
        Thread releaser = new Thread(() -> {
          try {
            Thread.sleep(100);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          release.countDown();
        });
        releaser.start();
        assertTrue(r.protectReadOnlySlabs());
        releaser.join();
        assertTrue(((SimContext) ctx).poisonedBy().isEmpty(), () -> "poisoned: " + ((SimContext) ctx).poisonedBy());
        assertEquals(MemoryAccess.READ, readOnlySlab(session).mapping().access());
        assertEquals(values, readOnlySlab(session).slab().address());
        assertValues(r.function().invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
      } finally {
        closeQuietly(r);
      }
    }
  }

  /**
   * The example models' kernels only read their weights, by their PTX (the analysis {@code mayHaveBeenWritten} asks):
   * at every launch of their sample request, no argument slot that points into a read-only buffer is one the kernel
   * may store through. Were it otherwise, a first request in the restore window would name their weight slabs and
   * silently keep them out of the HBM tier. (These tiny configs fit in one 2 MiB page, so they have no read-only slab
   * of their own; the MLP below has one.)
   */
  @ParameterizedTest(name = "{0}")
  @ValueSource(strings = {"mlp", "gpt2", "llama"})
  void theExampleModelsKernelsStoreIntoNoReadOnlyBuffer(String model) throws Exception {
    String[] fcr = example(model);
    JsonNode request = JSON.readTree(fcr[2]);
    JsonNode expected = build(model, fcr);
    ImageManifest m = Images.manifest(store, model);
    Set<String> readOnly = m.readOnlyAllocations();
    assertFalse(readOnly.isEmpty(), model);
    List<String> stores = new CopyOnWriteArrayList<>();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store).restore(model, ctx)) {
      AccessSpeculator speculator =
          new AccessSpeculator(f.session());
      f.session().setLaunchInterceptor((kernel, grid, block, shared, stream, args) -> {
        for (AccessSet.Access a : speculator.speculate(kernel, args).accesses()) {
          if (readOnly.contains(a.allocation()) && a.kind().writes()) {
            stores.add(kernel + " may store into " + a.allocation());
          }
        }
      });
      assertEquals(expected, f.invoke(FunctionRequest.of(request)).json());
    }
    assertTrue(stores.isEmpty(), stores.toString());
  }

  /** With weights on pages of their own (6 MiB): the first request in the window names no slab. */
  @Test
  void theMlpsFirstRequestInTheWindowNamesNoSlab() throws Exception {
    String[] fcr = example("mlp-wide");
    JsonNode request = JSON.readTree(fcr[2]);
    JsonNode expected = build("mlp-wide", fcr);
    ImageManifest m = Images.manifest(store, "mlp-wide");
    try (SimDriver driver = SimDriver.open(new SimOptions().setCopyGBps(COPY_GBPS));
        GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16);
        OnDemandRestore r = new OnDemandRestorer(store).restore(m, ctx, RestoreSource.STORE_ONLY, resources,
            new OnDemandOptions().setStreamInBackground(false))) {
      long readOnlySlabs = r.function().session().slabs().stream().filter(x -> x.slab().readOnly()).count();
      assertTrue(readOnlySlabs >= 1, r.function().session().slabs().toString());
      assertEquals(expected, r.function().invoke(FunctionRequest.of(request)).json());
      assertEquals(List.of(), r.mayHaveBeenWritten(), "the MLP's kernels store into no weight");
      r.streamRest();
      r.awaitResident();
      assertTrue(r.protectReadOnlySlabs());
      assertEquals(readOnlySlabs, r.protection().slabs());
    }
  }

  private static String[] example(String model) {
    return switch (model) {
      case "mlp" -> new String[] {"dev.thaw.examples.mlp.MlpFunction",
          "{\"layers\": [32, 96, 64, 10], \"seed\": 3, \"maxBatch\": 2}",
          "{\"inputs\": [[" + "0.5, -0.25, ".repeat(15) + "1.0, 2.0]]}"};
      case "mlp-wide" -> new String[] {"dev.thaw.examples.mlp.MlpFunction",
          "{\"layers\": [512, 2048, 256], \"seed\": 3, \"maxBatch\": 1}",
          "{\"inputs\": [[" + "0.5, -0.25, ".repeat(255) + "1.0, 2.0]]}"};
      case "gpt2" -> new String[] {"dev.thaw.examples.gpt2.Gpt2Function",
          "{\"model\": \"tiny\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 16}",
          "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 4}"};
      default -> new String[] {"dev.thaw.examples.llama.LlamaFunction",
          "{\"model\": \"tiny-qwen2\", \"maxBatch\": 1, \"maxTokens\": 16}",
          "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 3}"};
    };
  }

  /** Builds {@code tag} from {function, config, request}; returns the sample's response. */
  private static JsonNode build(String tag, String[] fcr) throws Exception {
    BuildOptions o = new BuildOptions().setFunctionClass(fcr[0]).setConfig(fcr[1]).setTag(tag)
        .addSampleRequest(JSON.readTree(fcr[2])).setStagingBytes(1 << 20).setHashThreads(2);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      return new ImageBuilder(store, new FixedSizeChunker(64 << 10)).build(o, ctx, ProgressListener.NONE)
          .sampleResponses().get(0).json();
    }
  }

  @Test
  void aWholeRestoreProtectsTheReadOnlySlabAfterItsCopies() throws Exception {
    List<String> faults = new CopyOnWriteArrayList<>();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoredFunction<?> f = new ImageRestorer(store).restore("probe", ctx)) {
      ((SimContext) ctx).addLaunchListener(l -> l.fault().ifPresent(x -> faults.add(l.kernelName() + ": "
          + x.getMessage())));
      assertEquals(MemoryAccess.READ, readOnlySlab(f.session()).mapping().access());
      assertValues(f.invoke(FunctionRequest.of(JSON.readTree(WRITE_OUT))).json(), 3.25, 3.25, 3.25, 3.25);
      assertValues(f.invoke(FunctionRequest.of(JSON.readTree(READ))).json(), 1000, 1001, 1002, 1003);
      CudaException e = assertThrows(CudaException.class,
          () -> f.invoke(FunctionRequest.of(JSON.readTree(WRITE_WEIGHTS))));
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, e.code(), e.getMessage());
      assertTrue(faults.size() == 1 && faults.get(0).contains("mapped read-only"), faults.toString());
    }
  }

  /**
   * The sim device's answers to a copy or memset into read-only memory, in a child process: each refused at the call
   * ({@code CUDA_ERROR_INVALID_VALUE}, not sticky: the device works on), the bytes unchanged. {@code
   * SlabProtectionGpuTest} holds the GPU's answers against these.
   */
  @Test
  void aCopyOrMemsetIntoReadOnlyMemoryIsRefusedAtTheCall() throws Exception {
    Map<String, String> sim = SlabProtectionChild.run("copies", "sim");
    System.out.println("sim device, copies into read-only memory: " + sim);
    assertEquals(SIM_COPIES, sim);
  }

  static final Map<String, String> SIM_COPIES = Map.of("syncCopy", "CUDA_ERROR_INVALID_VALUE",
      "syncMemset", "CUDA_ERROR_INVALID_VALUE", "usableAfterSync", "ok", "asyncEnqueue", "CUDA_ERROR_INVALID_VALUE",
      "asyncSync", "ok", "unchanged", "true", "usableAfterAsync", "ok");

  static FunctionSession.MappedSlab readOnlySlab(FunctionSession session) {
    List<FunctionSession.MappedSlab> ro = session.slabs().stream().filter(s -> s.slab().readOnly()).toList();
    assertEquals(1, ro.size(), session.slabs().toString());
    assertEquals(List.of("values"), ro.get(0).slab().buffers());
    assertEquals(2L << 20, ro.get(0).slab().size());
    return ro.get(0);
  }

  static void assertValues(JsonNode response, double... expected) {
    JsonNode values = response.get("values");
    assertEquals(expected.length, values.size(), response.toString());
    for (int i = 0; i < expected.length; i++) {
      assertEquals(expected[i], values.get(i).doubleValue(), response.toString());
    }
  }

  private static void closeQuietly(OnDemandRestore r) {
    try {
      r.close();
    } catch (RuntimeException e) {
      // A poisoned device refuses the teardown's synchronization; the session is freed regardless.
    }
  }
}
