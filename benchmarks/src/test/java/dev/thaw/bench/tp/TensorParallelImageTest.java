package dev.thaw.bench.tp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.collective.CollectiveKernels;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.LlamaConfig.Architecture;
import dev.thaw.examples.llama.LlamaRankFunction;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.SeededLlamaWeights;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.restore.GroupRestorer;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.PinnedImageSource;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.ResidencyProbe;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.CopyInterceptor;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A tensor-parallel Llama's group image on four simulated peer devices, in a real RocksDB store: built at 2 and 4
 * ranks, cold-started in a fresh driver whose copies lag the kernels, it answers with the ids and logits of the same
 * split model never imaged, bit for bit (and the single device's ids); no launch of any rank touches a byte of its
 * rank before that byte is resident (each rank's launches gated by its own restore); a missing, unreadable or
 * foreign rank image is refused naming the rank; a rank whose restore fails, or whose bytes cannot be read during
 * the first request, fails the group's start without a hang, with nothing left on any device.
 */
class TensorParallelImageTest {

  /** One query head per key-value head, an untied head, an odd vocabulary: splits 2 and 4 ways. */
  static final LlamaConfig TINY = new LlamaConfig("tp-image-tiny", Architecture.LLAMA, 64, 2, 4, 4, 32, 128, 97, 64,
      1e-5f, 10000, null, false, false, 0, HalfType.BF16);
  static final int[][] PROMPTS = {{3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46}, {26, 43, 38, 32, 7}};
  static final int NEW_TOKENS = 6;
  static final int MAX_BATCH = 2;
  static final int MAX_TOKENS = 40;
  /** Copies this slow lag the sim's kernels, so the first request runs while the bytes stream in. */
  static final double COPY_GBPS = 0.02;

  @TempDir
  static Path dir;
  static RocksChunkStore store;
  static final SeededLlamaWeights WEIGHTS = new SeededLlamaWeights(TINY, 7);

  @BeforeAll
  static void openStore() {
    store = RocksChunkStore.open(dir.resolve("store"));
  }

  @AfterAll
  static void closeStore() {
    store.close();
  }

  private static int[] devices(int n) {
    int[] d = new int[n];
    for (int i = 0; i < n; i++) {
      d[i] = i;
    }
    return d;
  }

  private static SimDriver fourDevices(double copyGBps) {
    SimOptions o = new SimOptions().setDeviceCount(4);
    return SimDriver.open(copyGBps > 0 ? o.setCopyGBps(copyGBps) : o);
  }

  /** Builds the group of TINY over n ranks under tag, in a driver of its own; the never-imaged split's answer. */
  private static LlamaTensorParallel.Result build(String tag, int n) throws Exception {
    try (SimDriver driver = fourDevices(0)) {
      TensorParallelImages.build(driver, devices(n), WEIGHTS, MAX_BATCH, MAX_TOKENS, PROMPTS, NEW_TOKENS, true,
          store, new FastCdcChunker(), tag, new BuildOptions(), ProgressListener.NONE);
      assertEquals(0, driver.memoryInUse(), "the build frees every rank's session");
      try (LlamaTensorParallel split = LlamaTensorParallel.open(driver, devices(n), WEIGHTS, MAX_BATCH, MAX_TOKENS)) {
        return split.generate(PROMPTS, NEW_TOKENS);
      }
    }
  }

  /** The contexts, resources and host caches of one cold start, in a fresh driver. */
  private static final class Targets implements AutoCloseable {
    final SimDriver driver;
    final List<GpuContext> contexts = new ArrayList<>();
    final List<RestoreResources> resources = new ArrayList<>();
    final List<PinnedImageSource> caches = new ArrayList<>();
    final List<GroupRestorer.Target> targets = new ArrayList<>();

    Targets(List<RestorePlan> plans, boolean hostCache) {
      driver = fourDevices(COPY_GBPS);
      for (int r = 0; r < plans.size(); r++) {
        GpuContext ctx = driver.createContext(r);
        contexts.add(ctx);
        // Slots as large as the chunker's largest chunk (1 MiB): a store read never splits one.
        resources.add(RestoreResources.create(ctx, 2, 1 << 20, 2, 1 << 16));
        RestoreSource source = RestoreSource.STORE_ONLY;
        if (hostCache) {
          PinnedImageSource cache = PinnedImageSource.load(plans.get(r), store, ctx, 2);
          caches.add(cache);
          source = cache;
        }
        targets.add(new GroupRestorer.Target(ctx, source, resources.get(r)));
      }
    }

    @Override
    public void close() {
      resources.forEach(RestoreResources::close);
      caches.forEach(PinnedImageSource::close);
      contexts.forEach(GpuContext::close);
      driver.close();
    }
  }

  private static List<RestorePlan> plans(String tag) {
    return GroupImage.read(store, tag).ranks().stream().map(RestorePlan::of).toList();
  }

  @ParameterizedTest(name = "{0} ranks")
  @ValueSource(ints = {2, 4})
  void aColdStartedGroupAnswersAsTheSplitModelNeverImagedWithEveryLaunchGatedByItsOwnRank(int n) throws Exception {
    String tag = "tiny-tp" + n;
    LlamaTensorParallel.Result expected = build(tag, n);
    LlamaTensorParallel.Result single;
    try (SimDriver driver = fourDevices(0);
        LlamaTensorParallel one = LlamaTensorParallel.open(driver, devices(1), WEIGHTS, MAX_BATCH, MAX_TOKENS)) {
      single = one.generate(PROMPTS, NEW_TOKENS);
    }
    assertArrayEquals(single.tokens(), expected.tokens(), "the split chooses the single device's ids");

    GroupImage.Stored stored = GroupImage.read(store, tag);
    assertEquals(n, stored.group().ranks());
    for (int r = 0; r < n; r++) {
      assertEquals(GroupImage.rankTag(tag, r), stored.group().rankTags().get(r));
      assertEquals(LlamaRankFunction.class.getName(), stored.ranks().get(r).function().className());
    }
    List<RestorePlan> plans = stored.ranks().stream().map(RestorePlan::of).toList();
    // From the host cache and from the store; streaming in the background, or purely on demand (every byte a launch
    // needs promoted by that launch's gate: the collectives' writes are checked against copies that land late).
    for (int mode = 0; mode < 3; mode++) {
      boolean hostCache = mode != 1;
      boolean background = mode != 2;
      try (Targets t = new Targets(plans, hostCache)) {
        List<RankProbe> probes = new ArrayList<>();
        LlamaTensorParallel.Result got;
        try (TensorParallelImages.Cold cold = TensorParallelImages.start(new GroupRestorer(store), plans, t.targets,
            new OnDemandOptions().setStreamInBackground(background))) {
          for (FunctionSession s : cold.restore().sessions()) {
            probes.add(new RankProbe(s));
          }
          got = cold.model().generate(PROMPTS, NEW_TOKENS);
          cold.restore().streamRest();
          cold.restore().awaitResident();
          for (int r = 0; r < n; r++) {
            OnDemandRestore rank = cold.restore().ranks().get(r);
            RankProbe probe = probes.get(r);
            assertTrue(probe.launches() > 0);
            assertTrue(probe.collectives() > 0, "rank " + r + " exchanged");
            List<String> violations = probe.violations(rank);
            assertTrue(violations.isEmpty(), "rank " + r + ":\n" + String.join("\n", violations));
            assertEquals(plans.get(r).manifest().totalBytes(), rank.stats().bytes());
          }
          probes.forEach(RankProbe::close);
        }
        assertArrayEquals(expected.tokens(), got.tokens(), "ids from " + (hostCache ? "the host cache" : "the store")
            + (background ? "" : ", on demand"));
        for (int b = 0; b < PROMPTS.length; b++) {
          assertArrayEquals(expected.logits()[b], got.logits()[b], "logits of sequence " + b + ", bit for bit");
        }
        assertEquals(0, t.driver.memoryInUse(), "a closed group leaves nothing on any device");
      }
    }
  }

  @Test
  void withoutTheGateTheSameProbeFindsLaunchesReadingBytesNotYetLanded() throws Exception {
    String tag = "tiny-ungated";
    build(tag, 2);
    List<RestorePlan> plans = plans(tag);
    try (Targets t = new Targets(plans, true);
        TensorParallelImages.Cold cold = TensorParallelImages.start(new GroupRestorer(store), plans, t.targets,
            new OnDemandOptions().setStreamInBackground(false))) {
      List<RankProbe> probes = new ArrayList<>();
      for (FunctionSession s : cold.restore().sessions()) {
        probes.add(new RankProbe(s, false));
      }
      cold.model().generate(PROMPTS, NEW_TOKENS);
      cold.restore().streamRest();
      cold.restore().awaitResident();
      List<String> violations = probes.get(0).violations(cold.restore().ranks().get(0));
      probes.forEach(RankProbe::close);
      assertFalse(violations.isEmpty(), "held back until after the request, an ungated restore is caught");
    }
  }

  @Test
  void aMissingUnreadableOrForeignRankImageIsRefusedNamingTheRank() throws Exception {
    build("tiny-a", 2);
    build("tiny-b", 2);
    ImageNotFoundException none = assertThrows(ImageNotFoundException.class, () -> GroupImage.read(store, "nothing"));
    assertTrue(none.getMessage().contains("nothing-rank0"), none.getMessage());

    // Rank 1 of another build of the same model: refused, its build named.
    byte[] foreign = store.manifest(GroupImage.rankTag("tiny-b", 1)).orElseThrow();
    byte[] own = store.manifest(GroupImage.rankTag("tiny-a", 1)).orElseThrow();
    ImageManifest ownRank1 = ImageManifest.read(own);
    store.commit(GroupImage.rankTag("tiny-a", 1), foreign, ownRank1.chunkDigests());
    InvalidManifestException other = assertThrows(InvalidManifestException.class,
        () -> GroupImage.read(store, "tiny-a"));
    assertTrue(other.getMessage().contains("rank 1") && other.getMessage().contains("not built together"),
        other.getMessage());

    store.commit(GroupImage.rankTag("tiny-a", 1), "{not json".getBytes(), Set.of());
    InvalidManifestException corrupt = assertThrows(InvalidManifestException.class,
        () -> GroupImage.read(store, "tiny-a"));
    assertTrue(corrupt.getMessage().contains("rank 1"), corrupt.getMessage());

    store.delete(GroupImage.rankTag("tiny-a", 1));
    InvalidManifestException missing = assertThrows(InvalidManifestException.class,
        () -> GroupImage.read(store, "tiny-a"));
    assertTrue(missing.getMessage().contains("rank 1's image 'tiny-a-rank1' is not in the store"),
        missing.getMessage());

    // A rank image is not a function of its own.
    assertThrows(RuntimeException.class, () -> new LlamaRankFunction().init(null, null));
  }

  @Test
  void aRankWhoseRestoreFailsReleasesTheOthers() throws Exception {
    String tag = "tiny-taken";
    build(tag, 2);
    List<RestorePlan> plans = plans(tag);
    try (Targets t = new Targets(plans, true)) {
      // Rank 1's first slab address is taken on its device: its rebuild fails; rank 0's restore is closed.
      ImageManifest.Allocation first = plans.get(1).manifest().allocations().get(0);
      try (VirtualRange taken = t.contexts.get(1).reserveExact(first.address() & -t.contexts.get(1).granularity(),
          t.contexts.get(1).granularity())) {
        assertNotNull(taken);
        ImageRestoreException e = assertThrows(ImageRestoreException.class,
            () -> TensorParallelImages.start(new GroupRestorer(store), plans, t.targets, new OnDemandOptions()));
        assertTrue(e.getMessage().startsWith("rank 1 of 2"), e.getMessage());
        assertEquals(0, t.driver.memoryInUse(), "rank 0's restore was closed");
        // Prepared ahead, the same: every prepared rank is taken by its restore or closed.
        GroupRestorer restorer = new GroupRestorer(store);
        List<PreparedRestore> prepared = restorer.prepare(plans, t.targets);
        assertThrows(ImageRestoreException.class,
            () -> TensorParallelImages.startPrepared(restorer, prepared, t.targets, new OnDemandOptions()));
        assertTrue(prepared.stream().allMatch(PreparedRestore::taken));
        assertEquals(0, t.driver.memoryInUse(), "rank 0's restore was closed");
      }
      // The same targets serve the next start.
      try (TensorParallelImages.Cold cold = TensorParallelImages.start(new GroupRestorer(store), plans, t.targets,
          new OnDemandOptions())) {
        assertEquals(NEW_TOKENS, cold.model().generate(PROMPTS, NEW_TOKENS).tokens()[0].length);
      }
      assertEquals(0, t.driver.memoryInUse());
    }
  }

  @Test
  void aRankWhoseBytesCannotBeReadFailsTheFirstRequestWithoutAHangAndFreesEveryRank() throws Exception {
    String tag = "tiny-unreadable";
    build(tag, 2);
    List<RestorePlan> good = plans(tag);
    // Rank 1's down projection of layer 0 names a chunk the store does not hold.
    ImageManifest m = good.get(1).manifest();
    String victim = "model.layers.0.mlp.down_proj.weight";
    List<ImageManifest.Allocation> allocations = m.allocations().stream().map(a -> {
      if (!a.name().equals(victim)) {
        return a;
      }
      List<ImageManifest.Chunk> chunks = new ArrayList<>(a.chunks());
      ImageManifest.Chunk c = chunks.get(0);
      byte[] junk = new byte[c.length()];
      junk[0] = 42;
      chunks.set(0, new ImageManifest.Chunk(Digest.of(ByteBuffer.wrap(junk)), c.offset(), c.length()));
      return new ImageManifest.Allocation(a.name(), a.address(), a.size(), chunks);
    }).toList();
    List<RestorePlan> plans = List.of(good.get(0), RestorePlan.of(m.withAllocations(allocations)));
    try (Targets t = new Targets(plans, false)) {
      TensorParallelImages.Cold cold = TensorParallelImages.start(new GroupRestorer(store), plans, t.targets,
          new OnDemandOptions());
      RuntimeException failed = assertThrows(RuntimeException.class,
          () -> cold.model().generate(PROMPTS, NEW_TOKENS));
      assertNotNull(failed.getMessage());
      try {
        cold.close();
      } catch (RuntimeException e) {
        // Rank 1's restore failed: its close reports it after freeing what it held.
      }
      assertEquals(0, t.driver.memoryInUse(), "nothing of either rank is left on a device");
    }
  }

  /**
   * The residency check of one rank, as the image-builder's {@code ResidencyProbe}, across the group's collective
   * launches too, which no session sees: a session launch starts after a timing event recorded right before it (after
   * the gate's waits); a collective launch, queued on the rank's stream by the group, no earlier than the last event
   * recorded on that stream before it (its session launch, or the gate's wait for a copy or fill the passes made).
   * Each rank's launches are checked against its own image; a peer's partial read by a collective was written, after
   * its own rank's wait, by that peer's gated product, which the peer's probe checks.
   */
  static final class RankProbe implements CopyInterceptor, AutoCloseable {
    private record Mark(GpuEvent event, String kernel) {}

    private static final Set<String> COLLECTIVES = Set.of(CollectiveKernels.ALL_REDUCE_ADD,
        CollectiveKernels.ALL_GATHER_COLUMNS);

    private final FunctionSession session;
    private final SimContext sim;
    private final CopyInterceptor gate;
    private final List<Mark> marks = new ArrayList<>();
    private final List<SimLaunchRecord> records = new CopyOnWriteArrayList<>();
    private final Consumer<SimLaunchRecord> listener = records::add;

    RankProbe(FunctionSession session) {
      this(session, true);
    }

    RankProbe(FunctionSession session, boolean gated) {
      this.session = session;
      this.sim = (SimContext) session.context();
      this.gate = gated ? (CopyInterceptor) session.launchInterceptor() : null;
      sim.addLaunchListener(listener);
      session.setLaunchInterceptor(this);
    }

    private synchronized void mark(GpuStream stream, String kernel) {
      GpuEvent e = session.context().createEvent(true);
      e.record(stream);
      marks.add(new Mark(e, kernel));
    }

    @Override
    public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
        KernelArgs args) {
      if (gate != null) {
        gate.beforeLaunch(kernel, grid, block, sharedMemBytes, stream, args);
      }
      mark(stream, kernel.entry());
    }

    @Override
    public void beforeDeviceAccess(long address, long bytes, GpuStream stream) {
      if (gate != null) {
        gate.beforeDeviceAccess(address, bytes, stream);
      }
      mark(stream, null);
    }

    @Override
    public boolean uploadInstead(long dstDevice, ByteBuffer src, GpuStream stream) {
      return gate != null && gate.uploadInstead(dstDevice, src, stream);
    }

    synchronized int launches() {
      return (int) marks.stream().filter(m -> m.kernel() != null).count();
    }

    int collectives() {
      return (int) records.stream().filter(r -> COLLECTIVES.contains(r.kernelName())).count();
    }

    /** Every byte of this rank's image a launch touched before it was resident; empty when the gating held. */
    synchronized List<String> violations(OnDemandRestore restore) {
      List<ImageManifest.Allocation> allocations = restore.plan().manifest().allocations();
      List<String> out = new ArrayList<>();
      int m = 0;
      GpuEvent floor = null;
      for (int k = 0; k < records.size(); k++) {
        SimLaunchRecord r = records.get(k);
        while (m < marks.size() && marks.get(m).kernel() == null) {
          floor = marks.get(m++).event();
        }
        GpuEvent start;
        if (COLLECTIVES.contains(r.kernelName())) {
          start = floor;
          if (start == null) {
            throw new AssertionError("collective launch " + k + " before any launch of the rank's session");
          }
        } else {
          if (m >= marks.size() || !marks.get(m).kernel().equals(r.kernelName())) {
            throw new AssertionError("launch " + k + " ran " + r.kernelName() + ", the probe saw "
                + (m < marks.size() ? marks.get(m).kernel() : "nothing"));
          }
          start = marks.get(m++).event();
          floor = start;
        }
        ResidencyProbe.lateTouches(k, r, start.elapsedMillisSince(restore.originEvent()), allocations, restore, out);
      }
      return out;
    }

    @Override
    public void close() {
      sim.removeLaunchListener(listener);
      synchronized (this) {
        marks.forEach(m -> m.event().close());
      }
    }
  }
}
