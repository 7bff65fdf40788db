package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.speculation.AccessProfile;
import dev.thaw.runtime.speculation.PointerTableFunction;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * On-demand restore on a GPU, in one process and one context: images built here (GPU profiling) and restored at
 * their addresses from the host cache and from the store. The validating mode runs every launch instrumented with
 * "resident or waited for" as the allowed set: no violation, and the function answers as at build. A planted kernel
 * that reads through a pointer table is {@code unsafe} and waits for everything; trusted as {@code exact} instead,
 * the instrumentation catches it reading {@code t0} early. Run with {@code bin/thaw-test --select-class} and
 * {@code THAW_DEVICE=cuda}; skipped, with the reason, where no GPU is usable.
 */
class OnDemandRestoreGpuTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  static Path dir;
  private static RocksChunkStore store;
  private static CudaDriver driver;
  private static GpuContext ctx;
  private static RestoreResources resources;
  private static final Map<String, JsonNode> requests = new HashMap<>();
  private static final Map<String, JsonNode> responses = new HashMap<>();

  @BeforeAll
  static void build() throws Exception {
    if (!CudaDriver.availability().available()) {
      return;
    }
    store = RocksChunkStore.open(dir.resolve("store"));
    driver = CudaDriver.open();
    ctx = driver.createContext(0);
    resources = RestoreResources.create(ctx);
    build("mlp", "dev.thaw.examples.mlp.MlpFunction", "{\"layers\": [784, 512, 512, 10], \"maxBatch\": 4}",
        "{\"inputs\": [[" + "0.5, -0.25, ".repeat(391) + "1.0, 2.0]]}");
    build("gpt2", "dev.thaw.examples.gpt2.Gpt2Function",
        "{\"model\": \"gpt2\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 32}",
        "{\"tokens\": [[464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290]], \"maxNewTokens\": 4}");
    build("planted", PointerTableFunction.class.getName(), "{\"n\": 100000}", "{}");
  }

  @BeforeEach
  void needsAGpu() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
  }

  private static void build(String tag, String function, String config, String request) throws Exception {
    JsonNode r = JSON.readTree(request);
    BuildOptions o = new BuildOptions().setFunctionClass(function).setConfig(config).setTag(tag).addSampleRequest(r);
    JsonNode response = new ImageBuilder(store, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE)
        .sampleResponses().get(0).json();
    requests.put(tag, r);
    responses.put(tag, response);
  }

  @AfterAll
  static void close() {
    if (resources != null) {
      resources.close();
    }
    if (ctx != null) {
      ctx.close();
    }
    if (driver != null) {
      driver.close();
    }
    if (store != null) {
      store.close();
    }
  }

  static Stream<Arguments> cases() {
    Stream.Builder<Arguments> b = Stream.builder();
    for (String tag : List.of("mlp", "gpt2", "planted")) {
      for (boolean hostCache : new boolean[] {true, false}) {
        for (boolean background : new boolean[] {true, false}) {
          b.add(Arguments.of(tag, hostCache, background));
        }
      }
    }
    return b.build();
  }

  @ParameterizedTest(name = "{0}, host cache {1}, background {2}")
  @MethodSource("cases")
  void validatingModeFindsNoLaunchTouchingWhatIsNotResidentOrWaitedFor(String tag, boolean hostCache,
      boolean background) throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    RestorePlan plan = RestorePlan.of(manifest);
    try (PinnedImageSource cache = hostCache ? PinnedImageSource.load(plan, store, ctx, 8) : null;
        OnDemandRestore r = new OnDemandRestorer(store).restore(plan, ctx,
            cache == null ? RestoreSource.STORE_ONLY : cache, resources,
            new OnDemandOptions().setStreamInBackground(background).setValidate(true))) {
      JsonNode got = r.function().invoke(FunctionRequest.of(requests.get(tag))).json();
      OnDemandRestore.Validation v = r.validation();
      System.out.println("on-demand validation " + tag + " (host cache " + hostCache + ", background " + background
          + "): " + v + "; " + r.stats());
      assertEquals(0, v.violations(), String.join("\n", v.described()));
      assertTrue(v.checked() > 0);
      assertEquals(0, v.unchecked(), "every module instrumented");
      r.streamRest();
      r.awaitResident();
      assertEquals(responses.get(tag), got);
    }
  }

  @Test
  void gatedRestoresAnswerAsTheBuildDidAndTheWarmAnswerIsTheSame() throws Exception {
    for (String tag : List.of("mlp", "gpt2", "planted")) {
      RestorePlan plan = RestorePlan.of(Images.manifest(store, tag));
      try (PinnedImageSource cache = PinnedImageSource.load(plan, store, ctx, 8);
          OnDemandRestore r = new OnDemandRestorer(store).restore(plan, ctx, cache, resources,
              new OnDemandOptions())) {
        assertEquals(responses.get(tag), r.function().invoke(FunctionRequest.of(requests.get(tag))).json(), tag);
        r.awaitResident();
        assertEquals(responses.get(tag), r.function().invoke(FunctionRequest.of(requests.get(tag))).json(), tag);
      }
    }
  }

  @Test
  void thePlantedPointerTableKernelIsUnsafeOnTheGpuAndTrustingItWouldReadT0Early() throws Exception {
    ImageManifest manifest = Images.manifest(store, "planted");
    assertEquals(AccessProfile.Verdict.UNSAFE, manifest.profile().kernels().get(PointerTableFunction.TABLE).verdict());
    RestorePlan trusting = RestorePlan.of(OnDemandRestorerTest.withAllKernelsExact(manifest));
    try (PinnedImageSource cache = PinnedImageSource.load(trusting, store, ctx, 8);
        OnDemandRestore r = new OnDemandRestorer(store).restore(trusting, ctx, cache, resources,
            new OnDemandOptions().setStreamInBackground(false).setValidate(true))) {
      r.function().invoke(FunctionRequest.of(requests.get("planted")));
      OnDemandRestore.Validation v = r.validation();
      System.out.println("planted kernel trusted as exact: " + v);
      assertTrue(v.violations() > 0, v.toString());
      assertFalse(v.described().isEmpty());
      assertTrue(v.described().stream().allMatch(d -> d.contains("'t0'")), v.described().toString());
      r.streamRest();
      r.awaitResident();
    }
  }
}
