package dev.thaw.bench.restore;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.PeerSlabs;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.host.ProcessFds;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * Restores onto GPU 0 through its own link and through GPU 1's as well, on a node with two or more GPUs: the proof of
 * the multi-link restore and of the node-wide HBM tier (issue 27), run from the tarball by
 * {@code scripts/gpu/multilink-run.sh}. Images are {@link SyntheticImage}s shaped like GPT-2-large (1.55 GB) and
 * Llama-3.1-8B (16.06 GB), in a pinned host buffer as the host cache holds them; every restore's first round checks
 * every device byte against it.
 *
 * <ol>
 *   <li><b>links</b>: the devices, whether they are peers, and the three rates {@link HelperLink} measures (host → GPU
 *       0, host → GPU 1's ring, GPU 1 → GPU 0), with the peer copy by unified addressing and by
 *       {@code cuMemcpyPeerAsync};
 *   <li><b>restore</b>, per shape: one link, two links, two links with everything queued at once (at the default
 *       helper share), then two to every link of the node with the helpers lent whole: ready, resident (by the
 *       events), GB/s, the helpers' part;
 *   <li><b>hbm</b>, per shape: from GPU 0's own HBM tier; from GPU 1's tier by a peer copy ({@link PeerSlabs}), the
 *       slabs mapped on GPU 1 and relayed through its link's ring, then mapped for GPU 0 (each with its mapping time);
 *       from GPU 1's tier mapped as it is (kernels then read the weights over NVLink), with a read kernel's GB/s on local
 *       and on peer-mapped weights; the goal: other GPU's ≤ 1.1 × own + the weights at 300 GB/s;
 *   <li><b>impact</b>: a warm GPT-2-large on GPU 1, alone and while two-link restores of the largest shape run through
 *       its GPU, at the helper's whole link and at half;
 *   <li><b>sweep</b>: one restore per GPU at once, each through its own link, against one alone.
 * </ol>
 * Lines starting {@code SUMMARY} are the figures; the exit status is 1 if a byte check or a section failed.
 *
 * <p>Run: {@code java -cp 'lib/*:lib/bench/*' dev.thaw.bench.restore.MultiLinkHarness --out DIR [--shapes
 * gpt2-large,llama-8b] [--rounds 5] [--skip hbm,impact,sweep] [--impact-model gpt2-large]}. {@code THAW_DEVICE}
 * picks the device; on the sim device ({@code THAW_SIM_DEVICES=2}) nothing measured is a GPU number.
 */
public final class MultiLinkHarness {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int[] PROMPT = {15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275,
      21281, 39983, 5076, 24913, 29307};
  private static final long STAGING_BYTES = 256L << 20;

  private final GpuDriver driver;
  private final OnDemandRestorer restorer;
  private final int rounds;
  private final Set<String> skip;
  private final String impactModel;
  private final List<GpuContext> contexts = new ArrayList<>();
  private final List<RestoreResources> resources = new ArrayList<>();
  private final Map<ImageManifest, RestorePlan> plans = new HashMap<>();
  private final ObjectNode results = JSON.createObjectNode();
  private final List<String> summary = new ArrayList<>();
  private final List<String> failures = new ArrayList<>();
  private HelperLink link;
  /** A link from every other GPU to GPU 0, in ordinal order; {@link #link} is the first (GPU 1's). */
  private final List<HelperLink> helperLinks = new ArrayList<>();
  private PinnedBuffer staging;

  private MultiLinkHarness(GpuDriver driver, RocksChunkStore store, int rounds, Set<String> skip, String impactModel) {
    this.driver = driver;
    this.restorer = new OnDemandRestorer(store);
    this.rounds = rounds;
    this.skip = skip;
    this.impactModel = impactModel;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> a = parse(args);
    Path out = Path.of(a.getOrDefault("out", "."));
    Files.createDirectories(out);
    List<String> shapes = List.of(a.getOrDefault("shapes", "gpt2-large,llama-8b").split(","));
    int rounds = Integer.parseInt(a.getOrDefault("rounds", "5"));
    Set<String> skip = Set.of(a.getOrDefault("skip", "").split(","));
    Path tmp = Files.createTempDirectory("thaw-multilink");
    int status;
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.fromEnvironment());
        RocksChunkStore store = RocksChunkStore.open(tmp.resolve("store"))) {
      MultiLinkHarness h = new MultiLinkHarness(driver, store, rounds, skip,
          a.getOrDefault("impact-model", driver.isSimulated() ? "tiny" : "gpt2-large"));
      status = h.run(shapes, out);
    }
    System.exit(status);
  }

  private static Map<String, String> parse(String[] args) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i < args.length; i++) {
      if (!args[i].startsWith("--") || i + 1 >= args.length) {
        throw new IllegalArgumentException("usage: --out DIR [--shapes a,b] [--rounds N] [--skip hbm,impact,sweep]"
            + " [--impact-model NAME]; not understood: " + args[i]);
      }
      out.put(args[i].substring(2), args[++i]);
    }
    return out;
  }

  private int run(List<String> shapes, Path out) throws Exception {
    int n = driver.devices().size();
    results.put("driver", driver.name());
    ArrayNode devices = results.putArray("devices");
    for (int d = 0; d < n; d++) {
      System.out.println("device " + d + ": " + driver.devices().get(d).describe());
      devices.add(driver.devices().get(d).describe());
    }
    if (n < 2) {
      summary("one device only: nothing to restore through another link");
      return 2;
    }
    try {
      for (int d = 0; d < n; d++) {
        contexts.add(driver.createContext(d));
      }
      GpuContext target = contexts.get(0);
      for (GpuContext c : contexts) {
        resources.add(RestoreResources.create(c));
      }
      staging = target.allocatePinned(STAGING_BYTES);
      section("links", this::links);
      Impact impact = skip.contains("impact") ? null : section("impact setup", this::impactFunction);
      List<SyntheticImage> images = new ArrayList<>();
      try {
        // The figures that matter most first: a part cut short by the script's timeout leaves those before it.
        for (String shape : shapes) {
          long t = System.nanoTime();
          SyntheticImage image = SyntheticImage.create(target, shape, shape.hashCode());
          images.add(image);
          System.out.printf(Locale.ROOT, "%s: %.2f GB in %d allocations (%.2f GB read-only), made in %.1f s%n", shape,
              image.bytes() / 1e9, image.manifest().allocations().size(), image.readOnlyBytes() / 1e9,
              (System.nanoTime() - t) / 1e9);
          section(shape + " restore", () -> restoreSection(image));
          write(out);
        }
        if (!skip.contains("hbm")) {
          for (SyntheticImage image : images) {
            section(image.shape() + " hbm", () -> hbmSection(image));
            write(out);
          }
        }
        if (!skip.contains("sweep") && !images.isEmpty()) {
          section("sweep", () -> sweepSection(images.get(0)));
          write(out);
        }
        if (impact != null && !images.isEmpty()) {
          SyntheticImage largest = images.get(images.size() - 1);
          section("impact", () -> impactSection(impact, largest));
        }
      } finally {
        images.forEach(SyntheticImage::close);
        if (impact != null) {
          impact.close();
        }
      }
    } finally {
      close();
    }
    write(out);
    failures.forEach(f -> System.out.println("SUMMARY FAILED " + f));
    return failures.isEmpty() ? 0 : 1;
  }

  private void write(Path out) throws IOException {
    results.putPOJO("summary", summary);
    results.putPOJO("failures", failures);
    Files.writeString(out.resolve("multilink-results.json"), JSON.writerWithDefaultPrettyPrinter()
        .writeValueAsString(results));
  }

  /** A figure: printed at once (a run cut short keeps it) and kept for the results. */
  private void summary(String line) {
    summary.add(line);
    System.out.println("SUMMARY " + line);
  }

  private interface Section<T> {
    T run() throws Exception;
  }

  private <T> T section(String name, Section<T> body) {
    System.out.println("== " + name);
    try {
      return body.run();
    } catch (Exception | Error e) {
      failures.add(name + ": " + e);
      System.out.println("FAILED " + name + ": " + e);
      e.printStackTrace(System.out);
      return null;
    }
  }

  private void close() {
    helperLinks.forEach(HelperLink::close);
    if (staging != null) {
      staging.close();
    }
    resources.forEach(RestoreResources::close);
    contexts.forEach(GpuContext::close);
  }

  // ---- links ----

  private Void links() {
    GpuContext target = contexts.get(0);
    GpuContext helper = contexts.get(1);
    ObjectNode j = results.putObject("links");
    j.put("peers01", driver.canAccessPeer(0, 1)).put("peers10", driver.canAccessPeer(1, 0));
    System.out.println("peers: 0 -> 1 " + driver.canAccessPeer(0, 1) + ", 1 -> 0 " + driver.canAccessPeer(1, 0));
    HelperLink.Options options = new HelperLink.Options();
    System.out.println("GPU 1: " + helper.memoryInfo() + "; " + HelperLink.whyUnusable(target, helper, options)
        .orElse("usable as a helper"));
    long t = System.nanoTime();
    link = HelperLink.open(target, helper, options);
    helperLinks.add(link);
    System.out.printf(Locale.ROOT, "link opened in %.1f ms: %s%n", (System.nanoTime() - t) / 1e6, link);
    for (int d = 2; d < contexts.size(); d++) {
      GpuContext other = contexts.get(d);
      Optional<String> why = HelperLink.whyUnusable(target, other, options);
      if (why.isPresent()) {
        System.out.println("GPU " + d + ": not a helper: " + why.get());
        continue;
      }
      HelperLink more = HelperLink.open(target, other, options);
      helperLinks.add(more);
      System.out.println("GPU " + d + ": " + more);
    }
    j.put("directGBps", link.directGBps()).put("hostToHelperGBps", link.hostGBps()).put("peerGBps", link.peerGBps());
    double[] peer = peerCalls(target, helper);
    j.put("peerUnifiedGBps", peer[0]).put("peerMemcpyPeerGBps", peer[1]);
    summary(String.format(Locale.ROOT, "links: host -> GPU 0 %.1f GB/s; host -> GPU 1 %.1f GB/s; GPU 1 -> GPU 0 "
        + "%.1f GB/s (unified addressing %.1f, cuMemcpyPeerAsync %.1f, 256 MiB)", link.directGBps(), link.hostGBps(),
        link.peerGBps(), peer[0], peer[1]));
    return null;
  }

  /** GB/s of a 256 MiB copy from GPU 1's memory to GPU 0's, by each peer call; best of three each. */
  private double[] peerCalls(GpuContext target, GpuContext helper) {
    long bytes = 256L << 20;
    try (DeviceBuffer theirs = helper.allocateScratch(bytes); DeviceBuffer mine = target.allocateScratch(bytes);
        GpuStream s = target.createStream(); GpuEvent a = target.createEvent(true);
        GpuEvent b = target.createEvent(true)) {
      theirs.setAccessFor(target.device().ordinal(), MemoryAccess.READ);
      double[] best = new double[2];
      for (int round = 0; round < 3; round++) {
        for (int call = 0; call < 2; call++) {
          s.record(a);
          if (call == 0) {
            s.copyDeviceToDeviceAsync(mine.address(), theirs.address(), bytes);
          } else {
            s.copyPeerAsync(mine.address(), target, theirs.address(), helper, bytes);
          }
          s.record(b);
          b.synchronize();
          best[call] = Math.max(best[call], bytes / (b.elapsedMillisSince(a) * 1e6));
        }
      }
      return best;
    }
  }

  // ---- restores ----

  /** One restore's figures. */
  private record Run(double readyMillis, double residentMillis, double wallMillis, OnDemandRestore.Stats stats,
      Map<String, Long> links, String mismatch) {}

  /**
   * Restores {@code m} onto {@code c} and waits until it is resident; {@code check} compares every byte afterwards
   * (null: no check). {@code whileOpen} runs with the restore resident and open (a kernel on its memory), then
   * {@code afterStart} was run right after the call returned (closing descriptors a worker closes then).
   */
  private Run restore(int device, ImageManifest m, RestoreSource source, OnDemandOptions options,
      SyntheticImage check, Runnable afterStart, Consumer<OnDemandRestore> whileOpen) {
    GpuContext c = contexts.get(device);
    RestorePlan plan = plans.computeIfAbsent(m, RestorePlan::of);
    long t0 = System.nanoTime();
    OnDemandRestore r = restorer.restore(plan, c, source, resources.get(device), options);
    try (r) {
      long ready = System.nanoTime();
      if (afterStart != null) {
        afterStart.run();
      }
      r.awaitResident();
      long wall = System.nanoTime();
      long landed = r.residentNanos();
      String mismatch = check == null ? null : check.verify(c, m, staging);
      if (whileOpen != null) {
        whileOpen.accept(r);
      }
      return new Run((ready - t0) / 1e6, (landed - t0) / 1e6, (wall - t0) / 1e6, r.stats(), r.linkBytes(), mismatch);
    }
  }

  /** Runs {@code rounds} restores (the first checked), prints and records them; the runs' resident times' median. */
  private double variant(ObjectNode shape, SyntheticImage image, String name, Supplier<Run> round) {
    List<Run> runs = new ArrayList<>();
    for (int i = 0; i < rounds; i++) {
      runs.add(round.get());
    }
    Run first = runs.get(0);
    double[] resident = runs.stream().mapToDouble(Run::residentMillis).sorted().toArray();
    double[] ready = runs.stream().mapToDouble(Run::readyMillis).sorted().toArray();
    double median = resident[resident.length / 2];
    String check = first.mismatch() == null ? "every byte checked" : "MISMATCH " + first.mismatch();
    if (first.mismatch() != null) {
      failures.add(image.shape() + " " + name + ": " + first.mismatch());
    }
    System.out.printf(Locale.ROOT, "| %s | %s | %.2f | %.2f (%.2f-%.2f) | %.1f | %s, %d copies | %s |%n",
        image.shape(), name, ready[ready.length / 2], median, resident[0], resident[resident.length - 1],
        image.bytes() / (median * 1e6), first.links(), first.stats().copies(), check);
    ObjectNode v = shape.putObject(name);
    v.put("readyMillis", ready[ready.length / 2]).put("residentMillis", median).put("minMillis", resident[0])
        .put("maxMillis", resident[resident.length - 1]).put("gbps", image.bytes() / (median * 1e6))
        .put("copies", first.stats().copies()).put("checked", first.mismatch() == null);
    v.putPOJO("links", first.links());
    ArrayNode all = v.putArray("rounds");
    runs.forEach(r -> all.add(r.residentMillis()));
    return median;
  }

  private Void restoreSection(SyntheticImage image) {
    ObjectNode shape = shapeNode(image);
    System.out.println("| shape | restore | ready ms | resident ms (median, min-max) | GB/s | bytes by link | check |");
    System.out.println("|---|---|---|---|---|---|---|");
    ImageManifest m = image.manifest();
    double one = variant(shape, image, "1 link", () -> restore(0, m, image.source(), new OnDemandOptions(),
        image, null, null));
    double two = variant(shape, image, "2 links", () -> restore(0, m, image.source(), new OnDemandOptions()
        .setHelpers(List.of(link)), image, null, null));
    double all = variant(shape, image, "2 links, all queued", () -> restore(0, m, image.source(),
        new OnDemandOptions().setHelpers(List.of(link)).setWindowBytes(Long.MAX_VALUE), image, null, null));
    StringBuilder more = new StringBuilder();
    // The same with idle helpers lent whole (share 1), through every link the node has.
    for (int k = 1; k <= helperLinks.size(); k++) {
      List<HelperLink> lent = helperLinks.subList(0, k);
      double ms = variant(shape, image, (k + 1) + " links at share 1", () -> restore(0, m, image.source(),
          new OnDemandOptions().setHelpers(lent).setHelperShare(1.0), image, null, null));
      more.append(String.format(Locale.ROOT, "; %d links at share 1 %.2f ms (%.1f GB/s, x%.2f)", k + 1, ms,
          image.bytes() / (ms * 1e6), one / ms));
    }
    summary(String.format(Locale.ROOT, "%s %.2f GB from the host: 1 link %.2f ms (%.1f GB/s), 2 links %.2f ms"
        + " (%.1f GB/s, x%.2f), 2 links all queued %.2f ms (share %.1f)%s", image.shape(), image.bytes() / 1e9, one,
        image.bytes() / (one * 1e6), two, image.bytes() / (two * 1e6), one / two, all, OnDemandOptions.DEFAULT_HELPER_SHARE, more));
    return null;
  }

  private ObjectNode shapeNode(SyntheticImage image) {
    ObjectNode shapes = results.has("shapes") ? (ObjectNode) results.get("shapes") : results.putObject("shapes");
    ObjectNode shape = shapes.has(image.shape()) ? (ObjectNode) shapes.get(image.shape())
        : shapes.putObject(image.shape());
    shape.put("bytes", image.bytes()).put("readOnlyBytes", image.readOnlyBytes())
        .put("allocations", image.manifest().allocations().size());
    return shape;
  }

  // ---- the node-wide HBM tier ----

  /** Restores the image on {@code device} with exportable weights, protects and exports them, as an eviction does. */
  private List<ExportedSlab> leaveInTier(int device, SyntheticImage image) {
    OnDemandOptions exportable = new OnDemandOptions().setSlabSource(FunctionSession.SlabSource.EXPORTABLE_READ_ONLY);
    RestorePlan plan = plans.computeIfAbsent(image.manifest(), RestorePlan::of);
    try (OnDemandRestore r = restorer.restore(plan, contexts.get(device), image.source(), resources.get(device),
        exportable)) {
      r.awaitResident();
      if (!r.protectReadOnlySlabs()) {
        throw new IllegalStateException("the weights could not be protected on device " + device);
      }
      List<ExportedSlab> held = HbmExport.exportReadOnly(r.function().session(), r.mayHaveBeenWritten());
      if (held.isEmpty()) {
        throw new IllegalStateException("no read-only slab to export on device " + device);
      }
      return held;
    }
  }

  private static List<ExportedSlab> dup(List<ExportedSlab> slabs) {
    List<ExportedSlab> out = new ArrayList<>();
    try {
      for (ExportedSlab s : slabs) {
        out.add(s.withFd(ProcessFds.dup(s.fd())));
      }
      return out;
    } catch (IOException e) {
      HbmExport.close(out);
      throw new IllegalStateException(e);
    }
  }

  /** The host buffer, with what {@code slabs} imported resident (asked when the restore leases, after mapping). */
  private static RestoreSource tiered(SyntheticImage image, ResidentSlabs slabs) {
    return m -> {
      RestoreSource.Lease host = image.source().lease(m);
      Set<String> whole = slabs.residentBuffers();
      List<long[]> ranges = slabs.residentRanges();
      return new RestoreSource.Lease() {
        @Override
        public RestoreSource.HostChunk find(Digest digest) {
          return host.find(digest);
        }

        @Override
        public boolean resident(ImageManifest.Allocation allocation) {
          return whole.contains(allocation.name());
        }

        @Override
        public List<long[]> residentRanges() {
          return ranges;
        }
      };
    };
  }

  private Run fromTier(SyntheticImage image, List<ExportedSlab> held, boolean check,
      Consumer<OnDemandRestore> whileOpen) {
    ResidentSlabs slabs = new ResidentSlabs(dup(held));
    try {
      return restore(0, image.manifest(), tiered(image, slabs), new OnDemandOptions().setSlabSource(slabs),
          check ? image : null, slabs::close, whileOpen);
    } finally {
      slabs.close();
    }
  }

  private Void hbmSection(SyntheticImage image) throws Exception {
    ObjectNode shape = shapeNode(image);
    ImageManifest m = image.manifest();
    boolean[] first = {true};
    double[] readGBps = new double[2];
    List<ExportedSlab> own = leaveInTier(0, image);
    double same;
    try {
      same = variant(shape, image, "hbm: GPU 0's own tier", () -> fromTier(image, own, takeFirst(first),
          r -> readGBps[0] = Math.max(readGBps[0], readKernel(r, image, "local"))));
    } finally {
      HbmExport.close(own);
    }
    List<ExportedSlab> other = leaveInTier(1, image);
    double peer;
    double direct;
    double mapped;
    double[] relayMap = new double[rounds];
    double[] directMap = new double[rounds];
    try {
      // GPU 1's slabs mapped on GPU 1 alone and relayed through its link's ring; then mapped for GPU 0, which reads
      // GPU 1's memory itself (the way without a link).
      peer = variant(shape, image, "hbm: GPU 1's tier, peer copy through GPU 1's ring",
          peerCopy(image, () -> PeerSlabs.map(link, other), relayMap));
      direct = variant(shape, image, "hbm: GPU 1's tier, peer copy, mapped for GPU 0",
          peerCopy(image, () -> PeerSlabs.map(contexts.get(0), other), directMap));
      boolean[] firstMapped = {true};
      mapped = variant(shape, image, "hbm: GPU 1's tier, peer-mapped", () -> fromTier(image, other,
          takeFirst(firstMapped), r -> readGBps[1] = Math.max(readGBps[1], readKernel(r, image, "peer-mapped"))));
    } finally {
      HbmExport.close(other);
    }
    double goal = 1.1 * same + image.readOnlyBytes() / 300e6;
    double relayMapMillis = median(relayMap);
    double directMapMillis = median(directMap);
    shape.put("peerGoalMillis", goal).put("peerMeetsGoal", peer <= goal).put("peerRelayMapMillis", relayMapMillis)
        .put("peerDirectMapMillis", directMapMillis);
    if (readGBps[0] > 0) {
      shape.put("readKernelLocalGBps", readGBps[0]).put("readKernelPeerMappedGBps", readGBps[1]);
    }
    summary(String.format(Locale.ROOT, "%s HBM tier: GPU 0's own %.2f ms; GPU 1's by peer copy %.2f ms through GPU 1's"
        + " ring (%.1f GB/s of weights; goal <= 1.1 x %.2f + %.2f GB at 300 GB/s = %.2f ms: %s), %.2f ms mapped for"
        + " GPU 0 (mapping GPU 1's slabs: %.2f ms on GPU 1, %.2f ms for GPU 0); GPU 1's peer-mapped %.2f ms%s",
        image.shape(), same, peer, image.readOnlyBytes() / (peer * 1e6), same, image.readOnlyBytes() / 1e9, goal,
        peer <= goal ? "met" : "NOT met", direct, relayMapMillis, directMapMillis, mapped,
        readGBps[0] > 0 ? String.format(Locale.ROOT,
        "; a kernel reads local weights at %.0f GB/s, peer-mapped at %.0f GB/s", readGBps[0], readGBps[1]) : ""));
    return null;
  }

  /**
   * One round of a restore onto GPU 0 from GPU 1's tier by a peer copy, the slabs mapped by {@code map} (timed into
   * {@code mapMillis}, and counted in the round's figures): the first round checks every byte.
   */
  private Supplier<Run> peerCopy(SyntheticImage image, Supplier<PeerSlabs> map, double[] mapMillis) {
    boolean[] first = {true};
    int[] k = {0};
    return () -> {
      long t0 = System.nanoTime();
      PeerSlabs slabs = map.get();
      try {
        double millis = (System.nanoTime() - t0) / 1e6;
        Run r = restore(0, image.manifest(), slabs.over(image.source()), new OnDemandOptions(),
            takeFirst(first) ? image : null, null, null);
        if (k[0] < mapMillis.length) {
          mapMillis[k[0]++] = millis;
        }
        return new Run(r.readyMillis() + millis, r.residentMillis() + millis, r.wallMillis() + millis, r.stats(),
            r.links(), r.mismatch());
      } finally {
        slabs.close();
      }
    };
  }

  private static double median(double[] values) {
    double[] sorted = values.clone();
    Arrays.sort(sorted);
    return sorted.length == 0 ? Double.NaN : sorted[sorted.length / 2];
  }

  private static boolean takeFirst(boolean[] first) {
    boolean was = first[0];
    first[0] = false;
    return was;
  }

  /** GB/s of a kernel on GPU 0 reading the largest weight of the restored image; 0 on the sim device (no kernel). */
  private double readKernel(OnDemandRestore r, SyntheticImage image, String what) {
    if (driver.isSimulated()) {
      return 0;
    }
    ImageManifest.Allocation largest = image.manifest().allocations().stream().filter(a -> a.name().startsWith("w."))
        .max(Comparator.comparingLong(ImageManifest.Allocation::size)).orElseThrow();
    GpuContext c = contexts.get(0);
    try (GpuModule module = c.loadPtx(readPtx()); GpuStream s = c.createStream();
        DeviceBuffer out = c.allocateScratch(4096); GpuEvent a = c.createEvent(true);
        GpuEvent b = c.createEvent(true)) {
      Kernel k = module.kernel("thaw_read_xor");
      long words = largest.size() / 16;
      Dim3 grid = Dim3.of(c.device().multiprocessorCount() * 8);
      double best = 0;
      for (int i = 0; i < 4; i++) {
        s.record(a);
        k.launch(grid, Dim3.of(256), s, largest.address(), words, out.address());
        s.record(b);
        b.synchronize();
        if (i > 0) {
          best = Math.max(best, words * 16 / (b.elapsedMillisSince(a) * 1e6));
        }
      }
      System.out.printf(Locale.ROOT, "read kernel over %s (%.0f MB, %s): %.0f GB/s%n", largest.name(),
          largest.size() / 1e6, what, best);
      return best;
    }
  }

  private static String readPtx() {
    try (InputStream in = MultiLinkHarness.class.getResourceAsStream("/dev/thaw/bench/restore/peerread.ptx")) {
      if (in == null) {
        throw new IllegalStateException("peerread.ptx is not on the class path");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  // ---- the effect on a function running on the helper ----

  /** A warm function on GPU 1, in a context of its own, as a pooled worker there would run it. */
  private record Impact(GpuContext context, FunctionSession session, ThawFunction<Object> function, Object state,
      FunctionRequest request) implements AutoCloseable {

    double invokeMillis() {
      long t = System.nanoTime();
      try {
        function.invoke(session, state, request);
      } catch (Exception e) {
        throw new IllegalStateException("the function on GPU 1 failed", e);
      }
      return (System.nanoTime() - t) / 1e6;
    }

    @Override
    public void close() {
      session.close();
      context.close();
    }
  }

  @SuppressWarnings("unchecked")
  private Impact impactFunction() throws Exception {
    GpuContext c = driver.createContext(1);
    try {
      FunctionSession session = FunctionSession.record(c);
      ThawFunction<Object> f = (ThawFunction<Object>) FunctionLoader.load("dev.thaw.examples.gpt2.Gpt2Function");
      long t = System.nanoTime();
      Object state = f.init(session, JSON.readTree("{\"model\": \"" + impactModel
          + "\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 64}"));
      int[] prompt = impactModel.startsWith("tiny") ? Arrays.stream(PROMPT).map(x -> x % 97).toArray() : PROMPT;
      FunctionRequest request = FunctionRequest.of(JSON.readTree("{\"tokens\": [" + Arrays.toString(prompt)
          + "], \"maxNewTokens\": 1}"));
      Impact impact = new Impact(c, session, f, state, request);
      for (int i = 0; i < 5; i++) {
        impact.invokeMillis();
      }
      System.out.printf(Locale.ROOT, "%s on GPU 1: init %.0f ms, warm%n", impactModel, (System.nanoTime() - t) / 1e6);
      return impact;
    } catch (Exception | Error e) {
      c.close();
      throw e;
    }
  }

  private Void impactSection(Impact impact, SyntheticImage image) throws Exception {
    ObjectNode j = results.putObject("impact");
    j.put("function", impactModel).put("restoredShape", image.shape());
    double[] alone = latencies(impact, 150);
    report(j, "alone", alone, null, 0);
    List<String> parts = new ArrayList<>();
    parts.add(String.format(Locale.ROOT, "%s warm 16 -> 1 on GPU 1: p50 %.2f ms alone", impactModel, p(alone, 50)));
    for (double share : new double[] {1.0, 0.5}) {
      AtomicBoolean stop = new AtomicBoolean();
      List<Double> restores = new CopyOnWriteArrayList<>();
      CountDownLatch started = new CountDownLatch(1);
      ExecutorService bg = Executors.newSingleThreadExecutor();
      Future<?> loop = bg.submit(() -> {
        while (!stop.get()) {
          started.countDown();
          Run r = restore(0, image.manifest(), image.source(), new OnDemandOptions().setHelpers(List.of(link))
              .setHelperShare(share), null, null, null);
          restores.add(r.wallMillis());
        }
        return null;
      });
      double[] loaded;
      long window;
      try {
        started.await();
        // Invokes for as long as several restores take (the restores keep copying nearly all of that time).
        long t0 = System.nanoTime();
        List<Double> got = new ArrayList<>();
        while ((restores.size() < 6 || got.size() < 100) && System.nanoTime() - t0 < 4_000_000_000L) {
          got.add(impact.invokeMillis());
        }
        window = System.nanoTime() - t0;
        loaded = got.stream().mapToDouble(Double::doubleValue).sorted().toArray();
      } finally {
        stop.set(true);
        loop.get();
        bg.shutdown();
      }
      double[] rt = restores.stream().mapToDouble(Double::doubleValue).sorted().toArray();
      double busy = Math.min(1, Arrays.stream(rt).sum() / (window / 1e6));
      report(j, "share " + share, loaded, rt, busy);
      parts.add(String.format(Locale.ROOT, "%.2f ms (%+.1f%%) beside two-link restores of %s at share %.1f (%d, each "
          + "%.1f ms, restoring %.0f%% of the time)", p(loaded, 50), 100 * (p(loaded, 50) / p(alone, 50) - 1),
          image.shape(), share, rt.length, rt.length == 0 ? Double.NaN : rt[rt.length / 2], 100 * busy));
    }
    summary(String.join("; ", parts));
    return null;
  }

  private static double[] latencies(Impact impact, int n) {
    double[] out = new double[n];
    for (int i = 0; i < n; i++) {
      out[i] = impact.invokeMillis();
    }
    Arrays.sort(out);
    return out;
  }

  private static double p(double[] sorted, int percent) {
    return sorted[Math.min(sorted.length - 1, sorted.length * percent / 100)];
  }

  private static void report(ObjectNode j, String name, double[] sorted, double[] restores, double busy) {
    System.out.printf(Locale.ROOT, "impact, %s: %d invokes, p50 %.2f ms, p90 %.2f ms, max %.2f ms%s%n", name,
        sorted.length, p(sorted, 50), p(sorted, 90), sorted[sorted.length - 1], restores == null ? ""
        : String.format(Locale.ROOT, "; %d restores, median %.1f ms, restoring %.0f%% of the time", restores.length,
        restores.length == 0 ? Double.NaN : restores[restores.length / 2], 100 * busy));
    ObjectNode o = j.putObject(name);
    o.put("invokes", sorted.length).put("p50", p(sorted, 50)).put("p90", p(sorted, 90))
        .put("max", sorted[sorted.length - 1]);
    if (restores != null && restores.length > 0) {
      o.put("restores", restores.length).put("restoreMedianMillis", restores[restores.length / 2])
          .put("restoringShare", busy);
    }
  }

  // ---- one restore per GPU at once ----

  private Void sweepSection(SyntheticImage image) throws Exception {
    int n = contexts.size();
    ImageManifest m = image.manifest();
    ImageManifest.Allocation first = m.allocations().get(0);
    ImageManifest.Allocation last = m.allocations().get(m.allocations().size() - 1);
    long g = contexts.get(0).granularity();
    long span = (last.address() + last.size() - first.address() + g - 1) / g * g;
    List<ImageManifest> manifests = new ArrayList<>();
    manifests.add(m);
    // Each GPU's copy at addresses of its own (one process here; one worker per GPU on a node).
    List<VirtualRange> held = new ArrayList<>();
    try {
      held.add(contexts.get(0).reserveExact(first.address(), span));
      for (int d = 1; d < n; d++) {
        VirtualRange r = contexts.get(0).reserve(span, 0);
        held.add(r);
        manifests.add(image.at(r.address()));
      }
    } finally {
      held.forEach(VirtualRange::close);
    }
    ObjectNode j = results.putObject("sweep");
    j.put("shape", image.shape());
    RestoreSource source = image.source();
    double[] single = new double[rounds];
    for (int i = 0; i < rounds; i++) {
      single[i] = timeAll(List.of(0), manifests, source).get(0);
    }
    Arrays.sort(single);
    double alone = single[single.length / 2];
    j.put("aloneMillis", alone);
    System.out.printf(Locale.ROOT, "sweep: %s alone on GPU 0, one link: %.2f ms%n", image.shape(), alone);
    List<String> parts = new ArrayList<>();
    for (int k = 2; k <= n; k++) {
      List<Integer> devices = new ArrayList<>();
      for (int d = 0; d < k; d++) {
        devices.add(d);
      }
      List<List<Double>> byRound = new ArrayList<>();
      for (int i = 0; i < rounds; i++) {
        byRound.add(timeAll(devices, manifests, source));
      }
      double[] each = new double[k];
      for (int d = 0; d < k; d++) {
        int dd = d;
        double[] sorted = byRound.stream().mapToDouble(r -> r.get(dd)).sorted().toArray();
        each[d] = sorted[sorted.length / 2];
      }
      ArrayNode a = j.putArray("at" + k);
      Arrays.stream(each).forEach(a::add);
      String times = Arrays.toString(Arrays.stream(each).map(x -> Math.round(x * 100) / 100.0).toArray());
      System.out.printf(Locale.ROOT, "sweep: %d at once, one per GPU, each through its own link: %s ms%n", k, times);
      parts.add(k + " at once on " + k + " GPUs: " + times + " ms each");
    }
    summary(String.format(Locale.ROOT, "sweep, %s from the host, one link each: alone %.2f ms; %s", image.shape(),
        alone, String.join("; ", parts)));
    return null;
  }

  /** Restores {@code manifests.get(d)} on each device {@code d} at once, each through its own link: resident ms. */
  private List<Double> timeAll(List<Integer> devices, List<ImageManifest> manifests, RestoreSource source) {
    ExecutorService threads = Executors.newFixedThreadPool(devices.size());
    try {
      CountDownLatch go = new CountDownLatch(1);
      List<Future<Run>> runs = new ArrayList<>();
      for (int d : devices) {
        runs.add(threads.submit(() -> {
          go.await();
          return restore(d, manifests.get(d), source, new OnDemandOptions(), null, null, null);
        }));
      }
      go.countDown();
      List<Double> out = new ArrayList<>();
      for (Future<Run> f : runs) {
        out.add(f.get().residentMillis());
      }
      return out;
    } catch (Exception e) {
      throw new IllegalStateException(e);
    } finally {
      threads.shutdownNow();
    }
  }
}
