package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.runtime.speculation.AccessProfile;
import dev.thaw.runtime.speculation.PointerTableFunction;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Pins on-demand restore on the sim device, against the real store: for every example function (MLP, GPT-2 and a
 * Qwen2-style Llama in their tiny test configs, and a planted pointer-table kernel), from the host cache
 * and from the store, streaming in the background or only on demand, with the copy-bandwidth model on so that the
 * restore lags the kernels, no launch reads or writes a byte before it is resident (checked exactly by
 * {@link ResidencyProbe}) and the function answers as it did at build. Without the gate the same check finds
 * violations; a planted kernel that reads through a pointer table is {@code unsafe} and waits for everything.
 */
class OnDemandRestorerTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  /** Slow enough that copies lag the sim's kernels: tens of milliseconds for these images. */
  private static final double COPY_GBPS = 0.02;

  @TempDir
  static Path dir;
  private static RocksChunkStore store;
  private static final Map<String, JsonNode> requests = new HashMap<>();
  private static final Map<String, JsonNode> responses = new HashMap<>();

  @BeforeAll
  static void build() throws Exception {
    store = RocksChunkStore.open(dir.resolve("store"));
    build("mlp", "dev.thaw.examples.mlp.MlpFunction", "{\"layers\": [32, 96, 64, 10], \"seed\": 3, \"maxBatch\": 2}",
        "{\"inputs\": [[" + "0.5, -0.25, ".repeat(15) + "1.0, 2.0]]}");
    build("gpt2-tiny", "dev.thaw.examples.gpt2.Gpt2Function",
        "{\"model\": \"tiny\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 16}",
        "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 4}");
    build("llama-tiny", "dev.thaw.examples.llama.LlamaFunction",
        "{\"model\": \"tiny-qwen2\", \"maxBatch\": 1, \"maxTokens\": 16}",
        "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 3}");
    build("planted", PointerTableFunction.class.getName(), "{\"n\": 3000}", "{}");
  }

  private static void build(String tag, String function, String config, String request) throws Exception {
    JsonNode r = JSON.readTree(request);
    BuildOptions o = new BuildOptions().setFunctionClass(function).setConfig(config).setTag(tag).addSampleRequest(r)
        .setStagingBytes(1 << 16).setHashThreads(2);
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      JsonNode response = new ImageBuilder(store, new FixedSizeChunker(4096)).build(o, ctx, ProgressListener.NONE)
          .sampleResponses().get(0).json();
      requests.put(tag, r);
      responses.put(tag, response);
    }
  }

  @AfterAll
  static void closeStore() {
    store.close();
  }

  enum Source { HOST_CACHE, STORE }

  static Stream<Arguments> cases() {
    Stream.Builder<Arguments> b = Stream.builder();
    for (String tag : List.of("mlp", "gpt2-tiny", "llama-tiny", "planted")) {
      for (Source s : Source.values()) {
        b.add(Arguments.of(tag, s, true));
        b.add(Arguments.of(tag, s, false));
      }
    }
    return b.build();
  }

  @ParameterizedTest(name = "{0} from {1}, background {2}")
  @MethodSource("cases")
  void noLaunchTouchesAByteBeforeItIsResidentAndTheAnswerIsTheBuilds(String tag, Source from, boolean background)
      throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    try (Restored r = restore(manifest, from, new OnDemandOptions().setStreamInBackground(background));
        ResidencyProbe probe = new ResidencyProbe(r.restore.function().session(), true)) {
      JsonNode got = r.restore.function().invoke(FunctionRequest.of(requests.get(tag))).json();
      r.restore.streamRest();
      r.restore.awaitResident();
      assertEquals(responses.get(tag), got, "the restored function's answer");
      assertTrue(probe.launches() > 0);
      List<String> violations = probe.violations(r.restore);
      assertTrue(violations.isEmpty(), String.join("\n", violations));
      OnDemandRestore.Stats stats = r.restore.stats();
      assertEquals(manifest.totalBytes(), stats.bytes());
      assertEquals(manifest.totalBytes(), from == Source.STORE ? stats.storeBytes() : stats.hostBytes());
      // At most one copy per chunk: an allocation is one copy where its chunks lie back to back in the source, more
      // where they do not (a chunk repeated within it, zeros say, is stored once and copied to each place it fills).
      int chunks = manifest.allocations().stream().mapToInt(a -> a.chunks().size()).sum();
      assertTrue(stats.copies() <= chunks, stats + " for " + chunks + " chunks");
      if (background && from == Source.HOST_CACHE && (tag.equals("mlp") || tag.equals("gpt2-tiny"))
          && stats.promotions() == 0) {
        // A packed image from a cache laid out in restore order: allocations that follow each other on the device
        // and in the cache are copied as one run (the planted image's odd sizes leave 256-byte gaps between them, and
        // Llama's zero-filled scratch takes a copy per place its one stored chunk fills, so neither is counted here).
        // Only where no launch promoted one on its own: on a loaded machine the request can outrun the streamer
        // and take every allocation as a single copy, which is right too.
        assertTrue(stats.copies() < manifest.allocations().size(), stats.copies() + " copies for "
            + manifest.allocations().size() + " allocations");
      }
      if (!background) {
        // Nothing streamed on its own: every allocation the request used was promoted by a launch or a copy.
        assertTrue(stats.promotions() > 0, stats.toString());
        assertTrue(stats.waits() + stats.fullWaits() > 0, stats.toString());
      }
    }
  }

  @ParameterizedTest(name = "{0}")
  @EnumSource(OnDemandOptions.Promotion.class)
  void promotionsOnEitherStreamKeepTheGatingExactEvenInAReversedOrder(OnDemandOptions.Promotion promotion)
      throws Exception {
    // The profile's order reversed: every launch needs what the background order has not queued yet.
    ImageManifest m = Images.manifest(store, "gpt2-tiny");
    List<String> reversed = new ArrayList<>(m.profile().firstAccessOrder());
    Collections.reverse(reversed);
    ImageManifest manifest = m.withProfile(new ImageManifest.Profile(m.profile().orderSource(),
        m.profile().launches(), reversed, m.profile().kernels()));
    try (Restored r = restore(manifest, Source.HOST_CACHE,
        new OnDemandOptions().setPromotion(promotion).setWindowBytes(4096));
        ResidencyProbe probe = new ResidencyProbe(r.restore.function().session(), true)) {
      JsonNode got = r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json();
      r.restore.awaitResident();
      assertEquals(responses.get("gpt2-tiny"), got);
      List<String> violations = probe.violations(r.restore);
      assertTrue(violations.isEmpty(), String.join("\n", violations));
    }
  }

  @Test
  void uploadsOfTheFunctionWaitForTheirAllocationAndAreNotOverwritten() throws Exception {
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setStreamInBackground(false))) {
      JsonNode got = r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json();
      assertEquals(responses.get("gpt2-tiny"), got);
      assertEquals(3, r.restore.stats().stagedUploads(), "tokens, positions and cache rows were staged");
      r.restore.streamRest();
      r.restore.awaitResident();
      // Once resident, uploads are synchronous again and the answer is the same.
      assertEquals(responses.get("gpt2-tiny"),
          r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json());
    }
  }

  @Test
  void theSessionsOwnDeviceCopiesAndFillsWaitForWhatTheyTouch() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    ImageManifest.Allocation w0 = manifest.allocations().stream().filter(a -> a.name().equals("w0")).findFirst()
        .orElseThrow();
    byte[] image = new byte[(int) w0.size()];
    for (ImageManifest.Chunk c : w0.chunks()) {
      ByteBuffer b = ByteBuffer.allocate(c.length());
      store.readChunk(c.digest(), b);
      System.arraycopy(b.array(), 0, image, (int) c.offset(), c.length());
    }
    // Nothing streams on its own: only the gate can bring w0 and w1 in before the copy and the fill touch them.
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setStreamInBackground(false))) {
      FunctionSession session = r.restore.function().session();
      int n = 512;
      session.copy(new BufferRef("act0"), 0, new BufferRef("w0"), 0, n);
      session.fill(new BufferRef("w1"), 0, 256, (byte) 7);
      ByteBuffer copied = ByteBuffer.allocateDirect(n);
      session.download(new BufferRef("act0"), 0, copied);
      byte[] got = new byte[n];
      copied.get(0, got);
      assertArrayEquals(Arrays.copyOf(image, n), got, "act0 holds w0's restored bytes");
      r.restore.streamRest();
      r.restore.awaitResident();
      // The fill came after w1 was restored, so the restore did not undo it.
      ByteBuffer filled = ByteBuffer.allocateDirect(256);
      session.download(new BufferRef("w1"), 0, filled);
      for (int i = 0; i < 256; i++) {
        assertEquals(7, filled.get(i), "byte " + i + " of the fill");
      }
      assertTrue(r.restore.stats().waits() >= 2, r.restore.stats().toString());
    }
  }

  @Test
  void withoutTheGateLaunchesTouchBytesBeforeTheyAreResident() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setStreamInBackground(false));
        ResidencyProbe probe = new ResidencyProbe(r.restore.function().session(), false)) {
      r.restore.function().invoke(FunctionRequest.of(requests.get("mlp")));
      r.restore.streamRest();
      r.restore.awaitResident();
      List<String> violations = probe.violations(r.restore);
      assertFalse(violations.isEmpty(), "the probe must see ungated launches run on memory not restored yet");
      assertTrue(violations.get(0).contains("'w0'"), violations.get(0));
    }
  }

  @Test
  void thePlantedPointerTableKernelIsUnsafeAndWaitsForFullResidency() throws Exception {
    ImageManifest manifest = Images.manifest(store, "planted");
    assertEquals(AccessProfile.Verdict.UNSAFE, manifest.profile().kernels().get(PointerTableFunction.TABLE).verdict());
    assertEquals(AccessProfile.Verdict.EXACT,
        manifest.profile().kernels().get(PointerTableFunction.ARGS_ONLY).verdict());
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setStreamInBackground(false));
        ResidencyProbe probe = new ResidencyProbe(r.restore.function().session(), true)) {
      JsonNode got = r.restore.function().invoke(FunctionRequest.of(requests.get("planted"))).json();
      assertEquals(responses.get("planted"), got);
      assertEquals(1, r.restore.stats().fullWaits());
      r.restore.awaitResident();
      assertTrue(probe.violations(r.restore).isEmpty());
    }

    // Trusting its arguments instead, as an exact verdict would, lets it read t0 before t0 is resident.
    ImageManifest trusting = withAllKernelsExact(manifest);
    try (Restored r = restore(trusting, Source.HOST_CACHE, new OnDemandOptions().setStreamInBackground(false));
        ResidencyProbe probe = new ResidencyProbe(r.restore.function().session(), true)) {
      r.restore.function().invoke(FunctionRequest.of(requests.get("planted")));
      assertEquals(0, r.restore.stats().fullWaits());
      r.restore.streamRest();
      r.restore.awaitResident();
      List<String> violations = probe.violations(r.restore);
      assertFalse(violations.isEmpty());
      assertTrue(violations.stream().allMatch(v -> v.contains("'t0'")), String.join("\n", violations));
    }
  }

  @Test
  void theValidatingModeRunsEveryLaunchInstrumentedBehindTheGate() throws Exception {
    // On the sim the instrumented twins ignore their guard (the GPU test is where violations show): this pins that
    // every launch goes through the instrumented module, gated, and the answer stays the build's.
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    try (Restored r = restore(manifest, Source.HOST_CACHE,
        new OnDemandOptions().setStreamInBackground(false).setValidate(true))) {
      JsonNode got = r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json();
      assertEquals(responses.get("gpt2-tiny"), got);
      OnDemandRestore.Validation v = r.restore.validation();
      assertTrue(v.checked() > 10, v.toString());
      assertEquals(0, v.unchecked(), v.toString());
      assertTrue(r.restore.stats().promotions() > 0);
      r.restore.streamRest();
      r.restore.awaitResident();
    }
  }

  @Test
  void aTraceHasTheCopiesTheKernelsAndTheWaits() throws Exception {
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setTrace(true))) {
      r.restore.trace().instant("request");
      r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny")));
      r.restore.trace().instant("response");
      r.restore.awaitResident();
      Path file = dir.resolve("trace.json");
      r.restore.trace().writeChromeTrace(file);
      JsonNode events = JSON.readTree(Files.readAllBytes(file)).get("traceEvents");
      long copies = 0;
      long kernels = 0;
      for (JsonNode e : events) {
        copies += e.path("tid").asInt() == 2 && e.path("ph").asText().equals("X") ? 1 : 0;
        kernels += e.path("tid").asInt() == 3 && e.path("ph").asText().equals("X") ? 1 : 0;
        if (e.path("ph").asText().equals("X")) {
          assertTrue(e.get("dur").asDouble() >= 0, e.toString());
        }
      }
      assertEquals(manifest.allocations().size(), copies, "one copy span per allocation");
      assertTrue(kernels > 10, "kernels: " + kernels);
      assertTrue(r.restore.trace().firstLaunchNanos() > 0);
      Map<String, Double> host = new HashMap<>();
      for (JsonNode e : events) {
        if (e.path("tid").asInt() == 1 && e.path("ph").asText().equals("i")) {
          host.put(e.path("name").asText(), e.path("ts").asDouble());
        }
      }
      // The first copies may be a launch's, queued before the restore thread ran: both come after the start.
      assertTrue(host.get("restore starts") <= host.get("restore thread starts"), host.toString());
      assertTrue(host.get("restore starts") <= host.get("first copies queued"), host.toString());
    }
  }

  @Test
  void aBoundedTraceCoalescesItsCopiesAndLaunchesToTheCapAndSaysSo() throws Exception {
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    try (Restored r = restore(manifest, Source.HOST_CACHE, new OnDemandOptions().setTrace(true))) {
      long zero = System.nanoTime();
      r.restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny")));
      r.restore.awaitResident();
      int n = manifest.allocations().size();
      int cap = 3;
      assertTrue(n > 2 * cap, "the image has more allocations than the cap: " + n);
      JsonNode events = r.restore.trace().chromeTrace(zero, cap).get("traceEvents");
      List<JsonNode> copies = new ArrayList<>();
      long kernels = 0;
      long bytes = 0;
      long counted = 0;
      String note = null;
      for (JsonNode e : events) {
        if (e.path("tid").asInt() == 2 && e.path("ph").asText().equals("X")) {
          copies.add(e);
          bytes += e.path("args").path("bytes").asLong();
          counted += e.path("args").path("copies").asLong();
        }
        kernels += e.path("tid").asInt() == 3 && e.path("ph").asText().equals("X") ? 1 : 0;
        if (e.path("ph").asText().equals("i") && e.path("name").asText().contains("coalesced")) {
          note = e.path("name").asText();
        }
      }
      assertEquals(cap, copies.size(), "no more copy spans than the cap");
      assertEquals(n, counted, "every copy in one span");
      assertEquals(manifest.allocations().stream().mapToLong(ImageManifest.Allocation::size).sum(), bytes);
      assertEquals(n + " copies coalesced into 3 spans of up to " + ((n + 2) / 3), note);
      assertTrue(copies.get(0).path("name").asText().startsWith("copies 1-"), copies.get(0).toString());
      assertEquals(cap, kernels, "launches beyond the cap left out");
      assertTrue(events.toString().contains("launches after the first 3 of "), "and said so");
    }
  }

  @Test
  void aCorruptChunkFromTheStoreFailsTheRestoreAndEveryLaterLaunch() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    ImageManifest.Allocation w1 = manifest.allocations().stream().filter(a -> a.name().equals("w1")).findFirst()
        .orElseThrow();
    // A manifest naming another allocation's chunk where w1's should be: its bytes cannot match the length or digest.
    ImageManifest.Chunk wrong = new ImageManifest.Chunk(manifest.allocations().get(0).chunks().get(0).digest(),
        w1.chunks().get(0).offset(), w1.chunks().get(0).length() + 1);
    ImageManifest bad = withChunk(manifest, "w1", 0, wrong);
    try (Restored r = restore(bad, Source.STORE, new OnDemandOptions())) {
      CorruptChunkException e = assertThrows(CorruptChunkException.class, r.restore::awaitResident);
      assertTrue(e.getMessage().contains("allocation 'w1'"), e.getMessage());
      assertThrows(ImageRestoreException.class,
          () -> r.restore.function().invoke(FunctionRequest.of(requests.get("mlp"))));
    }
  }

  @Test
  // On a thread of its own, so that a restore stuck on a slot never handed back fails the test instead of hanging it.
  @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
  void aRestoreThatFailsWhileReadingAheadHandsItsStagingBackForTheNextRestore() throws Exception {
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    // The last allocation's first chunk made wrong: the restore fails with many of the chunks before it being read
    // ahead into both staging slots.
    ImageManifest.Allocation last = manifest.allocations().get(manifest.allocations().size() - 1);
    ImageManifest.Chunk wrong = new ImageManifest.Chunk(manifest.allocations().get(0).chunks().get(0).digest(),
        last.chunks().get(0).offset(), last.chunks().get(0).length());
    ImageManifest bad = withChunk(manifest, last.name(), 0, wrong);
    try (SimDriver driver = SimDriver.open(new SimOptions().setCopyGBps(COPY_GBPS));
        GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16)) {
      try (OnDemandRestore failed = new OnDemandRestorer(store).restore(RestorePlan.of(bad), ctx,
          RestoreSource.STORE_ONLY, resources, new OnDemandOptions())) {
        CorruptChunkException e = assertThrows(CorruptChunkException.class, failed::awaitResident);
        assertTrue(e.getMessage().contains("allocation '" + last.name() + "'"), e.getMessage());
      } catch (ImageRestoreException e) {
        // Its close reports the failure again; what matters is what the next restore finds.
      }
      try (OnDemandRestore next = new OnDemandRestorer(store).restore(RestorePlan.of(manifest), ctx,
          RestoreSource.STORE_ONLY, resources, new OnDemandOptions())) {
        JsonNode got = next.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json();
        next.awaitResident();
        assertEquals(responses.get("gpt2-tiny"), got, "the next restore's answer, through the same staging");
        assertEquals(manifest.totalBytes(), next.stats().storeBytes());
      }
    }
  }

  @ParameterizedTest(name = "from {0}")
  @EnumSource(Source.class)
  void bytesInTheLeasesResidentRangesAreNeverCopiedAndTheRestAre(Source from) throws Exception {
    // What the HBM tier hands a restore: device ranges that hold the image's bytes already and refuse writes. Here
    // they are fresh memory (it reads zero), so any copy into them would show; w0 lies partly in one, w1 wholly.
    ImageManifest manifest = Images.manifest(store, "mlp");
    ImageManifest.Allocation w0 = allocation(manifest, "w0");
    ImageManifest.Allocation w1 = allocation(manifest, "w1");
    List<long[]> ranges = List.of(new long[] {w0.address() + 100, w0.address() + w0.size() - 100},
        new long[] {w1.address(), w1.address() + w1.size()});
    long inRanges = w0.size() - 200 + w1.size();
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        RestoreResources resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16);
        PinnedImageSource cache = from == Source.HOST_CACHE ? PinnedImageSource.load(RestorePlan.of(manifest), store,
            ctx, 2) : null) {
      RestoreSource tiers = cache == null ? RestoreSource.STORE_ONLY : cache;
      RestoreSource withRanges = m -> {
        RestoreSource.Lease inner = tiers.lease(m);
        return new RestoreSource.Lease() {
          @Override
          public RestoreSource.HostChunk find(Digest digest) {
            return inner.find(digest);
          }

          @Override
          public List<long[]> residentRanges() {
            return ranges;
          }

          @Override
          public void close() {
            inner.close();
          }
        };
      };
      try (OnDemandRestore r = new OnDemandRestorer(store).restore(manifest, ctx, withRanges, resources,
          new OnDemandOptions())) {
        r.awaitResident();
        OnDemandRestore.Stats stats = r.stats();
        assertEquals(manifest.totalBytes() - inRanges, from == Source.STORE ? stats.storeBytes() : stats.hostBytes());
        assertEquals(inRanges, stats.residentBytes());
        for (ImageManifest.Allocation a : manifest.allocations()) {
          byte[] image = new byte[(int) a.size()];
          for (ImageManifest.Chunk c : a.chunks()) {
            ByteBuffer b = ByteBuffer.allocate(c.length());
            store.readChunk(c.digest(), b);
            System.arraycopy(b.array(), 0, image, (int) c.offset(), c.length());
          }
          ByteBuffer device = ByteBuffer.allocateDirect((int) a.size());
          ctx.copyDeviceToHost(device, a.address());
          for (int i = 0; i < image.length; i++) {
            long at = a.address() + i;
            boolean resident = ranges.stream().anyMatch(x -> x[0] <= at && at < x[1]);
            if (device.get(i) != (resident ? 0 : image[i])) {
              throw new AssertionError(a.name() + " byte " + i + (resident ? " (resident range) was written"
                  : " is not the image's") + ": " + device.get(i));
            }
          }
        }
      }
    }
  }

  // ---- helpers ----

  private static ImageManifest.Allocation allocation(ImageManifest m, String name) {
    return m.allocations().stream().filter(a -> a.name().equals(name)).findFirst().orElseThrow();
  }

  /** A sim driver with the copy-bandwidth model, its context, the restore's resources and source, and the restore. */
  private static final class Restored implements AutoCloseable {
    final SimDriver driver;
    final GpuContext ctx;
    final RestoreResources resources;
    final PinnedImageSource cache;
    final OnDemandRestore restore;

    Restored(ImageManifest manifest, Source from, OnDemandOptions options) {
      driver = SimDriver.open(new SimOptions().setCopyGBps(COPY_GBPS));
      ctx = driver.createContext(0);
      resources = RestoreResources.create(ctx, 2, 1 << 16, 2, 1 << 16);
      RestorePlan plan = RestorePlan.of(manifest);
      cache = from == Source.HOST_CACHE ? PinnedImageSource.load(plan, store, ctx, 2) : null;
      restore = new OnDemandRestorer(store).restore(plan, ctx, cache == null ? RestoreSource.STORE_ONLY : cache,
          resources, options);
    }

    @Override
    public void close() {
      try {
        restore.close();
      } catch (RuntimeException e) {
        // A failed restore's close still frees what it can.
      }
      if (cache != null) {
        cache.close();
      }
      resources.close();
      ctx.close();
      driver.close();
    }
  }

  private static Restored restore(ImageManifest manifest, Source from, OnDemandOptions options) {
    return new Restored(manifest, from, options);
  }

  static ImageManifest withAllKernelsExact(ImageManifest m) {
    Map<String, AccessProfile.KernelProfile> kernels = new HashMap<>();
    m.profile().kernels().forEach((k, p) -> kernels.put(k,
        new AccessProfile.KernelProfile(AccessProfile.Verdict.EXACT, p.launches(), List.of(), List.of())));
    return m.withProfile(new ImageManifest.Profile(m.profile().orderSource(), m.profile().launches(),
        m.profile().firstAccessOrder(), kernels));
  }

  private static ImageManifest withChunk(ImageManifest m, String allocation, int index, ImageManifest.Chunk chunk) {
    List<ImageManifest.Allocation> allocations = m.allocations().stream().map(a -> {
      if (!a.name().equals(allocation)) {
        return a;
      }
      List<ImageManifest.Chunk> chunks = new ArrayList<>(a.chunks());
      chunks.set(index, chunk);
      return new ImageManifest.Allocation(a.name(), a.address(), a.size(), chunks);
    }).toList();
    return m.withAllocations(allocations);
  }
}
