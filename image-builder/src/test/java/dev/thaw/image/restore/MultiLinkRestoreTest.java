package dev.thaw.image.restore;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
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
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.ToLongFunction;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Pins restores onto one device through other devices' links ({@link HelperLink}) and from another device's memory
 * ({@link RestoreSource.Lease#peerCopy}), on simulated devices that are peers, with the real store: no launch touches
 * a byte before it is resident (checked exactly by {@link ResidencyProbe}, with copies lagging the kernels), every byte
 * lands, the answer is the build's; the split follows the links' rates and a helper's share; a helper is refused for
 * the reasons a node gives. From another device's memory laid out as the target (a slab of its HBM tier), allocations
 * that lie back to back are one copy per run, runs longer than the host link's, and every allocation is still gated;
 * read through a link from that device ({@link RestoreSource.Lease#peerLink}), the memory needs no mapping on the
 * target, and each run is one copy into the ring and one pull per slot.
 */
class MultiLinkRestoreTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  /** Slow enough that copies lag the sim's kernels. */
  private static final double COPY_GBPS = 0.02;
  private static final long MIB = 1L << 20;

  @TempDir
  static Path dir;
  private static RocksChunkStore store;
  private static final Map<String, JsonNode> requests = new HashMap<>();
  private static final Map<String, JsonNode> responses = new HashMap<>();

  @BeforeAll
  static void build() throws Exception {
    store = RocksChunkStore.open(dir.resolve("store"));
    build("mlp", "dev.thaw.examples.mlp.MlpFunction",
        "{\"layers\": [256, 256, 256, 256, 256, 256, 256, 256, 10], \"seed\": 3, \"maxBatch\": 2}",
        "{\"inputs\": [[" + "0.5, -0.25, ".repeat(127) + "1.0, 2.0]]}");
    // Weights of 4 MiB, so that runs from another device's memory outgrow the host link's.
    build("mlp-wide", "dev.thaw.examples.mlp.MlpFunction",
        "{\"layers\": [1024, 1024, 1024, 1024, 1024, 10], \"seed\": 4, \"maxBatch\": 1}",
        "{\"inputs\": [[" + "0.5, -0.25, ".repeat(511) + "1.0, 2.0]]}");
    build("gpt2-tiny", "dev.thaw.examples.gpt2.Gpt2Function",
        "{\"model\": \"tiny\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 16}",
        "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 4}");
    build("llama-tiny", "dev.thaw.examples.llama.LlamaFunction",
        "{\"model\": \"tiny-qwen2\", \"maxBatch\": 1, \"maxTokens\": 16}",
        "{\"tokens\": [[5, 17, 3, 40, 2, 9]], \"maxNewTokens\": 3}");
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

  static Stream<String> images() {
    return Stream.of("mlp", "gpt2-tiny", "llama-tiny");
  }

  static Stream<Arguments> cases() {
    Stream.Builder<Arguments> b = Stream.builder();
    for (String tag : List.of("mlp", "gpt2-tiny", "llama-tiny")) {
      b.add(Arguments.of(tag, true));
      b.add(Arguments.of(tag, false));
    }
    return b.build();
  }

  @ParameterizedTest(name = "{0}, background {1}")
  @MethodSource("cases")
  void throughTwoHelpersNoLaunchTouchesAByteBeforeItIsResidentAndTheAnswerIsTheBuilds(String tag,
      boolean background) throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    try (Node node = new Node(3, new SimOptions().setCopyGBps(COPY_GBPS).setPeerGBps(1)); Spaced source =
        new Spaced(manifest, node.target)) {
      List<HelperLink> links = List.of(node.link(1, new HelperLink.Options()), node.link(2, new HelperLink.Options()));
      // A small window: each link takes the next allocation as soon as it drains the one before (each helper lent
      // whole, as fast as the target's link).
      OnDemandOptions options = new OnDemandOptions().setStreamInBackground(background).setWindowBytes(4096)
          .setHelpers(links).setHelperShare(1.0);
      try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
          node.resources, options); ResidencyProbe probe = new ResidencyProbe(restore.function().session(), true)) {
        JsonNode got = restore.function().invoke(FunctionRequest.of(requests.get(tag))).json();
        restore.streamRest();
        restore.awaitResident();
        assertEquals(responses.get(tag), got, "the restored function's answer");
        List<String> violations = probe.violations(restore);
        assertTrue(violations.isEmpty(), String.join("\n", violations));
        OnDemandRestore.Stats stats = restore.stats();
        assertEquals(manifest.totalBytes(), stats.hostBytes());
        Map<String, Long> byLink = restore.linkBytes();
        assertEquals(manifest.totalBytes(), byLink.values().stream().mapToLong(Long::longValue).sum(),
            byLink.toString());
        assertEquals(stats.helperBytes(), byLink.get("device 1") + byLink.get("device 2"), byLink.toString());
        if (background) {
          assertTrue(stats.helperBytes() > 0, "the helpers carried part of it: " + byLink);
        }
        assertImage(node.target, manifest);
      }
    }
  }

  @Test
  void withEverythingQueuedAtOnceTheSplitFollowsTheLinksRates() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    // The target's link three times the helper's: the helper lands a quarter of the bytes, give or take a weight.
    HelperLink.Options rated = new HelperLink.Options().rates(3, 1, 50);
    try (Node node = new Node(2, new SimOptions().setCopyGBps(0.01).setPeerGBps(1));
        Spaced source = new Spaced(manifest, node.target)) {
      OnDemandOptions options = new OnDemandOptions().setWindowBytes(Long.MAX_VALUE)
          .setHelpers(List.of(node.link(1, rated))).setHelperShare(1.0);
      try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
          node.resources, options)) {
        restore.awaitResident();
        double share = restore.stats().helperBytes() / (double) manifest.totalBytes();
        assertTrue(share > 0.10 && share < 0.40, "the helper's part " + share + " of " + restore.linkBytes());
        assertImage(node.target, manifest);
      }
    }
  }

  @Test
  void aHelperLentAtPartOfItsLinkIsPacedToThatShare() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    // A small window keeps the target's link full, so the helper would take every other allocation; its link
    // "measured" at 1 MB/s and lent at half, it may take 0.5 MB a second (and the allocation that crosses the line).
    HelperLink.Options slow = new HelperLink.Options().rates(1, 0.001, 0.001);
    try (Node node = new Node(2, new SimOptions().setCopyGBps(0.02));
        Spaced source = new Spaced(manifest, node.target)) {
      long t0 = System.nanoTime();
      OnDemandOptions options = new OnDemandOptions().setWindowBytes(4096).setHelperShare(0.5)
          .setHelpers(List.of(node.link(1, slow)));
      try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
          node.resources, options)) {
        restore.awaitResident();
        double seconds = (System.nanoTime() - t0) / 1e9;
        long helped = restore.stats().helperBytes();
        long largest = manifest.allocations().stream().mapToLong(ImageManifest.Allocation::size).max().orElseThrow();
        assertTrue(helped <= 4096 + 0.0005e9 * seconds + largest,
            helped + " bytes through the helper in " + seconds + " s: " + restore.linkBytes());
        assertImage(node.target, manifest);
      }
    }
  }

  @Test
  void fromAnotherDevicesMemoryEveryAllocationIsPulledOverThePeerLinkAndGated() throws Exception {
    ImageManifest manifest = Images.manifest(store, "gpt2-tiny");
    try (Node node = new Node(2, new SimOptions().setCopyGBps(COPY_GBPS).setPeerGBps(0.05));
        Spaced host = new Spaced(manifest, node.target);
        DeviceBuffer elsewhere = node.contexts.get(1).allocateScratch(manifest.totalBytes()
            + manifest.allocations().size() * 256L)) {
      // The image's allocations laid out in device 1's memory, which device 0 may read: the node-wide HBM tier.
      Map<String, Long> at = new LinkedHashMap<>();
      long offset = 0;
      for (ImageManifest.Allocation a : manifest.allocations()) {
        at.put(a.name(), elsewhere.address() + offset);
        node.contexts.get(1).copyHostToDevice(elsewhere.address() + offset, bytesOf(a));
        offset += (a.size() + 255) / 256 * 256;
      }
      elsewhere.setAccessFor(0, MemoryAccess.READ);
      RestoreSource fromPeer = fromPeer(host, a -> at.getOrDefault(a.name(), 0L), null);
      try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, fromPeer,
          node.resources, new OnDemandOptions()); ResidencyProbe probe =
          new ResidencyProbe(restore.function().session(), true)) {
        JsonNode got = restore.function().invoke(FunctionRequest.of(requests.get("gpt2-tiny"))).json();
        restore.awaitResident();
        assertEquals(responses.get("gpt2-tiny"), got);
        List<String> violations = probe.violations(restore);
        assertTrue(violations.isEmpty(), String.join("\n", violations));
        OnDemandRestore.Stats stats = restore.stats();
        assertEquals(manifest.totalBytes(), stats.peerBytes(), stats.toString());
        assertEquals(0, stats.hostBytes(), stats.toString());
        assertImage(node.target, manifest);
      }
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("images")
  void fromAnotherDevicesSlabRunsThatLieBackToBackOnBothSidesAreOneCopyAndEveryAllocationIsStillGated(String tag)
      throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    try (Node node = new Node(2, new SimOptions().setCopyGBps(COPY_GBPS).setPeerGBps(0.05));
        Spaced host = new Spaced(manifest, node.target);
        MirroredSlab slab = new MirroredSlab(manifest, node.contexts.get(1))) {
      slab.grant(0);
      RestoreSource fromPeer = slab.over(host, null);
      invokedWhileCopying(node, tag, fromPeer);
      List<Long> stretches = stretches(RestorePlan.of(manifest), Residency.PEER_MERGE_BYTES);
      assertEquals(stretches.size(), restoredUntouched(node, manifest, fromPeer).copies(), "one copy per stretch");
      assertTrue(stretches.size() < manifest.allocations().size(), "some allocations lie back to back: "
          + stretches.size() + " stretches of " + manifest.allocations().size());
    }
  }

  @Test
  void runsFromAnotherDevicesMemoryOutgrowTheHostLinksAndEveryAllocationIsStillGated() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp-wide");
    RestorePlan plan = RestorePlan.of(manifest);
    List<Long> peerRuns = stretches(plan, Residency.PEER_MERGE_BYTES);
    assertTrue(peerRuns.size() < stretches(plan, Residency.MERGE_BYTES).size(),
        "the image has a stretch longer than a host run: " + peerRuns);
    try (Node node = new Node(2, new SimOptions().setPeerGBps(0.05)); Spaced host = new Spaced(manifest, node.target);
        MirroredSlab slab = new MirroredSlab(manifest, node.contexts.get(1))) {
      slab.grant(0);
      invokedWhileCopying(node, "mlp-wide", slab.over(host, null));
      assertEquals(peerRuns.size(), restoredUntouched(node, manifest, slab.over(host, null)).copies(),
          peerRuns.toString());
    }
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("images")
  void throughTheSourceDevicesRingItsMemoryNeedsNoMappingOnTheTargetAndEveryAllocationIsGated(String tag)
      throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    try (Node node = new Node(2, new SimOptions().setCopyGBps(COPY_GBPS).setPeerGBps(0.05));
        Spaced host = new Spaced(manifest, node.target);
        MirroredSlab slab = new MirroredSlab(manifest, node.contexts.get(1))) {
      // Mapped for device 1 alone: device 0 may not read it, so every byte must come through device 1's ring.
      assertThrows(RuntimeException.class, () -> node.target.copyDeviceToHost(ByteBuffer.allocateDirect(16),
          slab.buffer.address()));
      HelperLink relay = node.link(1, new HelperLink.Options());
      RestoreSource fromPeer = slab.over(host, relay);
      // Promotions too: the target cannot read that memory.
      assertEquals(manifest.totalBytes(), invokedWhileCopying(node, tag, fromPeer).get("peer"));
      // Each run: one copy into a slot of the ring and one pull out of it, per slot it fills.
      long slot = relay.options().slotBytes();
      long expected = 0;
      for (long bytes : stretches(RestorePlan.of(manifest), Residency.PEER_MERGE_BYTES)) {
        expected += 2 * ((bytes + slot - 1) / slot);
      }
      assertEquals(expected, restoredUntouched(node, manifest, fromPeer).copies());
      relay.borrow();
      relay.giveBack();
    }
  }

  @Test
  void aRelayThatIsAlsoAHelperOrForAnotherTargetIsRefused() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    try (Node node = new Node(3, new SimOptions()); Spaced host = new Spaced(manifest, node.target);
        MirroredSlab slab = new MirroredSlab(manifest, node.contexts.get(1));
        HelperLink elsewhere = HelperLink.open(node.contexts.get(2), node.contexts.get(1),
            new HelperLink.Options().minFreeBytes(0).measureBytes(0).slots(2).slotBytes(MIB))) {
      HelperLink relay = node.link(1, new HelperLink.Options());
      IllegalArgumentException both = assertThrows(IllegalArgumentException.class, () -> new OnDemandRestorer(store)
          .restore(manifest, node.target, slab.over(host, relay), node.resources,
              new OnDemandOptions().setHelpers(List.of(relay))));
      assertTrue(both.getMessage().contains("one or the other"), both.getMessage());
      IllegalArgumentException other = assertThrows(IllegalArgumentException.class, () -> new OnDemandRestorer(store)
          .restore(manifest, node.target, slab.over(host, elsewhere), node.resources, new OnDemandOptions()));
      assertTrue(other.getMessage().contains("another context"), other.getMessage());
      // Nothing was lent by the refused restores.
      relay.borrow();
      relay.giveBack();
    }
  }

  @Test
  void aLinkGoesBackToItsOwnerOnceTheRestoreIsResidentThoughTheRestoreStaysOpen() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    try (Node node = new Node(2, new SimOptions().setCopyGBps(COPY_GBPS).setPeerGBps(1));
        Spaced source = new Spaced(manifest, node.target)) {
      HelperLink link = node.link(1, new HelperLink.Options());
      OnDemandOptions options = new OnDemandOptions().setWindowBytes(4096).setHelpers(List.of(link)).setHelperShare(1.0);
      try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
          node.resources, options)) {
        assertThrows(IllegalStateException.class, link::borrow, "lent while the restore copies");
        restore.awaitResident();
        assertTrue(restore.stats().helperBytes() > 0, restore.linkBytes().toString());
        // The owner (a pooled worker) may close it now, or lend it to another restore.
        link.borrow();
        link.giveBack();
        assertEquals(responses.get("mlp"), restore.function().invoke(FunctionRequest.of(requests.get("mlp"))).json());
        assertImage(node.target, manifest);
      }
    }
  }

  @Test
  void aHelperIsRefusedWhenItIsTheTargetNotAPeerOrShortOfMemoryAndALinkIsLentOnce() throws Exception {
    HelperLink.Options options = new HelperLink.Options().minFreeBytes(0).measureBytes(0);
    try (Node node = new Node(2, new SimOptions().setMemoryBytes(1L << 30))) {
      GpuContext helper = node.contexts.get(1);
      assertTrue(HelperLink.whyUnusable(node.target, node.target, options).orElseThrow().contains("target itself"));
      assertTrue(HelperLink.whyUnusable(node.target, helper, new HelperLink.Options().minFreeBytes(1L << 30))
          .orElseThrow().contains("short of memory"));
      assertTrue(HelperLink.whyUnusable(node.target, helper, options).isEmpty());
      try (HelperLink link = HelperLink.open(node.target, helper, options)) {
        link.borrow();
        assertThrows(IllegalStateException.class, link::borrow);
        link.giveBack();
        OnDemandOptions twice = new OnDemandOptions();
        assertThrows(IllegalArgumentException.class, () -> twice.setHelpers(List.of(link, link)));
        assertThrows(IllegalArgumentException.class, () -> twice.setHelperShare(0));
        assertThrows(IllegalArgumentException.class, () -> twice.setHelperShare(1.5));
      }
    }
    try (Node apart = new Node(2, new SimOptions().setPeerAccess(false))) {
      GpuContext helper = apart.contexts.get(1);
      assertTrue(HelperLink.whyUnusable(apart.target, helper, options).orElseThrow().contains("not peers"));
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> HelperLink.open(apart.target, helper, options));
      assertTrue(e.getMessage().contains("not peers"), e.getMessage());
    }
  }

  @Test
  void aLinkForAnotherTargetIsRefusedAndAMeasuredOneKnowsItsRates() throws Exception {
    ImageManifest manifest = Images.manifest(store, "mlp");
    try (Node node = new Node(3, new SimOptions()); Spaced source = new Spaced(manifest, node.target);
        HelperLink elsewhere = HelperLink.open(node.contexts.get(1), node.contexts.get(2),
            new HelperLink.Options().minFreeBytes(0).measureBytes(MIB))) {
      assertTrue(elsewhere.gbps() > 0 && elsewhere.directGBps() > 0, elsewhere.toString());
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
          () -> new OnDemandRestorer(store).restore(manifest, node.target, source, node.resources,
              new OnDemandOptions().setHelpers(List.of(elsewhere))));
      assertTrue(e.getMessage().contains("another context"), e.getMessage());
    }
  }

  // ---- fixtures ----

  /** Simulated devices that are peers, a context on each, restore resources and helper links onto device 0. */
  private static final class Node implements AutoCloseable {
    final SimDriver driver;
    final List<GpuContext> contexts = new ArrayList<>();
    final GpuContext target;
    final RestoreResources resources;
    final List<HelperLink> links = new ArrayList<>();

    Node(int devices, SimOptions options) {
      driver = SimDriver.open(options.setDeviceCount(devices));
      for (int d = 0; d < devices; d++) {
        contexts.add(driver.createContext(d));
      }
      target = contexts.get(0);
      resources = RestoreResources.create(target, 2, 1 << 16, 2, 1 << 16);
    }

    HelperLink link(int device, HelperLink.Options options) {
      HelperLink l = HelperLink.open(target, contexts.get(device),
          options.minFreeBytes(0).measureBytes(0).slots(2).slotBytes(Math.min(options.slotBytes(), MIB)));
      links.add(l);
      return l;
    }

    @Override
    public void close() {
      links.forEach(HelperLink::close);
      resources.close();
      contexts.forEach(GpuContext::close);
      driver.close();
    }
  }

  /**
   * A host cache that leaves a gap after every chunk: no two allocations lie back to back, so each is a run of its own
   * and the split between links is per allocation.
   */
  private static final class Spaced implements RestoreSource, AutoCloseable {
    final PinnedBuffer buffer;
    final Map<Digest, Long> offsets = new HashMap<>();

    Spaced(ImageManifest manifest, GpuContext context) {
      Map<Digest, Integer> lengths = new LinkedHashMap<>();
      manifest.allocations().forEach(a -> a.chunks().forEach(c -> lengths.putIfAbsent(c.digest(), c.length())));
      manifest.modules().forEach(m -> lengths.putIfAbsent(m.cubin().digest(), m.cubin().length()));
      long size = 0;
      for (Map.Entry<Digest, Integer> e : lengths.entrySet()) {
        offsets.put(e.getKey(), size);
        size += e.getValue() + 4096;
      }
      buffer = context.allocatePinned(size);
      lengths.forEach((d, n) -> VerifiedChunks.read(store, d, buffer.slice(offsets.get(d), n), "the test's cache"));
    }

    @Override
    public Lease lease(ImageManifest manifest) {
      return digest -> {
        Long at = offsets.get(digest);
        return at == null ? null : new HostChunk(buffer, at);
      };
    }

    @Override
    public void close() {
      buffer.close();
    }
  }

  /**
   * Restores {@code tag} onto the node's target from {@code source} and invokes it at once, copies lagging the kernels:
   * no launch touched a byte before it was resident, the answer is the build's, every read-only byte landed, and
   * every byte came from another device's memory. Returns the restore's bytes by lane.
   */
  private static Map<String, Long> invokedWhileCopying(Node node, String tag, RestoreSource source)
      throws Exception {
    ImageManifest manifest = Images.manifest(store, tag);
    try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
        node.resources, new OnDemandOptions()); ResidencyProbe probe =
        new ResidencyProbe(restore.function().session(), true)) {
      JsonNode got = restore.function().invoke(FunctionRequest.of(requests.get(tag))).json();
      restore.awaitResident();
      assertEquals(responses.get(tag), got);
      List<String> violations = probe.violations(restore);
      assertTrue(violations.isEmpty(), String.join("\n", violations));
      assertEquals(manifest.totalBytes(), restore.stats().peerBytes(), restore.stats().toString());
      assertImage(node.target, manifest);
      return restore.linkBytes();
    }
  }

  /** Restores the image from {@code source} with nothing launched until it is resident; returns its figures. */
  private static OnDemandRestore.Stats restoredUntouched(Node node, ImageManifest manifest, RestoreSource source) {
    try (OnDemandRestore restore = new OnDemandRestorer(store).restore(manifest, node.target, source,
        node.resources, new OnDemandOptions())) {
      restore.awaitResident();
      assertEquals(0, restore.stats().promotions(), restore.stats().toString());
      assertImage(node.target, manifest);
      return restore.stats();
    }
  }

  /**
   * The bytes of {@code plan}'s runs from another device's slab: each a stretch of units in plan order that lie back to
   * back (on the target, and so in a slab laid out as the target), closed once it holds {@code merge} bytes.
   */
  private static List<Long> stretches(RestorePlan plan, long merge) {
    List<Long> out = new java.util.ArrayList<>();
    long bytes = 0;
    long end = -1;
    for (int u = 0; u < plan.unitCount(); u++) {
      ImageManifest.Allocation a = plan.unit(u);
      if (a.address() != end || bytes >= merge) {
        if (end >= 0) {
          out.add(bytes);
        }
        bytes = 0;
      }
      bytes += a.size();
      end = a.address() + a.size();
    }
    out.add(bytes);
    return out;
  }

  /**
   * {@code host}'s chunks, and each allocation's bytes in another device's memory at {@code at} (0: none), read by the
   * target or, with {@code link}, by that link's helper.
   */
  private static RestoreSource fromPeer(RestoreSource host, ToLongFunction<ImageManifest.Allocation> at,
      HelperLink link) {
    return m -> {
      RestoreSource.Lease inner = host.lease(m);
      return new RestoreSource.Lease() {
        @Override
        public RestoreSource.HostChunk find(Digest digest) {
          return inner.find(digest);
        }

        @Override
        public long peerCopy(ImageManifest.Allocation allocation) {
          return at.applyAsLong(allocation);
        }

        @Override
        public HelperLink peerLink() {
          return link;
        }

        @Override
        public void close() {
          inner.close();
        }
      };
    };
  }

  /**
   * Every allocation of an image in another device's memory, laid out as on the target (the same offsets from the
   * lowest address): what a read-only slab of that device's HBM tier is to a restore here.
   */
  private static final class MirroredSlab implements AutoCloseable {
    final DeviceBuffer buffer;
    final long lowest;
    final ImageManifest manifest;

    MirroredSlab(ImageManifest manifest, GpuContext on) {
      this.manifest = manifest;
      lowest = manifest.allocations().stream().mapToLong(ImageManifest.Allocation::address).min().orElseThrow();
      long highest = manifest.allocations().stream().mapToLong(a -> a.address() + a.size()).max().orElseThrow();
      buffer = on.allocateScratch(highest - lowest);
      for (ImageManifest.Allocation a : manifest.allocations()) {
        on.copyHostToDevice(buffer.address() + a.address() - lowest, bytesOf(a));
      }
    }

    void grant(int device) {
      buffer.setAccessFor(device, MemoryAccess.READ);
    }

    /** {@code host} for what has no copy here (none), this slab for every allocation, read through {@code link}. */
    RestoreSource over(RestoreSource host, HelperLink link) {
      return fromPeer(host, a -> buffer.address() + a.address() - lowest, link);
    }

    @Override
    public void close() {
      buffer.close();
    }
  }

  private static ByteBuffer bytesOf(ImageManifest.Allocation a) {
    ByteBuffer out = ByteBuffer.allocateDirect((int) a.size());
    for (ImageManifest.Chunk c : a.chunks()) {
      store.readChunk(c.digest(), out.slice((int) c.offset(), c.length()));
    }
    return out;
  }

  /** Every read-only allocation on the target holds the image's bytes (written ones the request may have changed). */
  private static void assertImage(GpuContext target, ImageManifest manifest) {
    for (ImageManifest.Allocation a : manifest.allocations()) {
      if (!manifest.readOnlyAllocations().contains(a.name())) {
        continue;
      }
      ByteBuffer want = bytesOf(a);
      ByteBuffer got = ByteBuffer.allocateDirect((int) a.size());
      target.copyDeviceToHost(got, a.address());
      byte[] w = new byte[want.capacity()];
      byte[] g = new byte[got.capacity()];
      want.get(0, w);
      got.get(0, g);
      assertArrayEquals(w, g, "allocation " + a.name());
    }
  }
}
