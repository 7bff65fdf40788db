package dev.thaw.bench.tiers;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.cache.CoalescedCopies;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostCacheSource;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * How an on-demand restore from the host image cache cuts an image into copies, and what that costs: the image's
 * chunk occurrences (repeats, gaps), the cache's layout of it (runs, bytes held), and cold restores in this process
 * through {@link HostCacheSource} exactly as a pooled worker makes them, with every copy they queue (count, runs,
 * sizes, which a launch promoted) and, on a GPU, when the last byte landed. Then the same copies replayed back to
 * back on one stream, without the restore's events and with one event after each: how much of the restore's time is
 * the copies' number and how much the events between them.
 *
 * <p>Usage: {@code CopyRunsBench --store DIR --image TAG=REQUEST.json [--build MODEL] [--also TAG] [--runs 3]
 * [--cache-bytes 4294967296] [--layout NAME]...}. {@code --build} builds a seeded GPT-2 of that size under TAG first
 * when the store lacks it; {@code --also} stages another image first, as a server with several images does.
 * On the sim device every time printed is simulated; counts and sizes are exact on both.
 */
public final class CopyRunsBench {

  private static final ObjectMapper JSON = new ObjectMapper();

  private CopyRunsBench() {}

  public static void main(String[] args) throws Exception {
    Path storeDir = null;
    String tag = null;
    byte[] request = null;
    String build = null;
    List<String> also = new ArrayList<>();
    int runs = 3;
    long cacheBytes = 4L << 30;
    List<HostCacheOptions.Layout> layouts = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--store" -> storeDir = Path.of(args[++i]);
        case "--image" -> {
          String[] kv = args[++i].split("=", 2);
          tag = kv[0];
          request = Files.readAllBytes(Path.of(kv[1]));
        }
        case "--build" -> build = args[++i];
        case "--also" -> also.add(args[++i]);
        case "--runs" -> runs = Integer.parseInt(args[++i]);
        case "--cache-bytes" -> cacheBytes = Long.parseLong(args[++i]);
        case "--layout" -> layouts.add(HostCacheOptions.layout(args[++i]));
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (layouts.isEmpty()) {
      layouts = List.of(HostCacheOptions.Layout.SHARED, HostCacheOptions.Layout.RUNS);
    }
    if (storeDir == null || tag == null) {
      throw new IllegalArgumentException("usage: CopyRunsBench --store DIR --image TAG=REQUEST.json [--build MODEL] "
          + "[--also TAG] [--runs N] [--cache-bytes N]");
    }
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.fromEnvironment(), SimOptions.fromEnvironment());
        GpuContext ctx = driver.createContext(0);
        RocksChunkStore store = RocksChunkStore.open(storeDir)) {
      System.out.println("device: " + ctx.device().name() + " (" + driver.name() + ")");
      if (build != null && store.manifest(tag).isEmpty()) {
        long t = System.nanoTime();
        BuildOptions o = new BuildOptions().functionClass("dev.thaw.examples.gpt2.Gpt2Function")
            .config("{\"model\": \"" + build + "\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 64}").tag(tag)
            .addSampleRequest(JSON.readTree(request));
        new ImageBuilder(store, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE);
        System.out.printf(Locale.ROOT, "built %s (%s) in %.1f s%n", tag, build, (System.nanoTime() - t) / 1e9);
      }
      ImageManifest manifest = Images.manifest(store, tag);
      occurrences(tag, manifest);
      FunctionRequest req = FunctionRequest.of(JSON.readTree(request));
      for (HostCacheOptions.Layout layout : layouts) {
        String p = tag + " [" + layout.name().toLowerCase(Locale.ROOT) + "]";
        try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().capacityBytes(cacheBytes)
            .layout(layout));
            HostCacheView view = HostCacheView.attach(cache.path(), ctx);
            RestoreResources resources = RestoreResources.create(ctx)) {
          List<CacheLease> others = new ArrayList<>();
          try {
            for (String other : also) {
              others.add(cache.stage(other, Images.manifest(store, other), store));
            }
            try (CacheLease lease = cache.stage(tag, manifest, store)) {
              ChunkPlacement placement = lease.placement();
              PinnedChunks chunks = view.chunks(placement);
              layout(p, manifest, placement, cache);
              List<OnDemandRestore.Copy> log = restores(p, manifest, store, ctx, chunks, resources, req, runs);
              replay(p, manifest, ctx, chunks, placement, log);
            }
          } finally {
            others.forEach(CacheLease::close);
          }
        }
      }
    }
  }

  /** What the image is made of, whatever the layout: occurrences, repeats, gaps between allocations. */
  private static void occurrences(String tag, ImageManifest m) {
    List<ImageManifest.Allocation> order = RestoreOrder.allocations(m);
    Map<Digest, Integer> seen = new HashMap<>();
    int occurrences = 0;
    int repeats = 0;
    long repeatBytes = 0;
    long bytes = 0;
    int empty = 0;
    Map<Integer, int[]> repeatsByLength = new java.util.TreeMap<>();
    for (ImageManifest.Allocation a : order) {
      if (a.chunks().isEmpty()) {
        empty++;
      }
      for (ImageManifest.Chunk c : a.chunks()) {
        occurrences++;
        bytes += c.length();
        if (seen.merge(c.digest(), 1, Integer::sum) > 1) {
          repeats++;
          repeatBytes += c.length();
          repeatsByLength.computeIfAbsent(c.length(), k -> new int[1])[0]++;
        }
      }
    }
    int gaps = 0;
    int jumps = 0;
    long gapBytes = 0;
    for (int i = 1; i < order.size(); i++) {
      long end = order.get(i - 1).address() + order.get(i - 1).size();
      long next = order.get(i).address();
      if (next > end) {
        gaps++;
        gapBytes += next - end;
      } else if (next < end) {
        jumps++;
      }
    }
    System.out.printf(Locale.ROOT, "%s image: %d allocations (%d without chunks), %.1f MB in %d chunk occurrences, "
        + "%d distinct chunks; %d repeats (%.2f MB) of %d chunks%n", tag, order.size(), empty, bytes / 1e6, occurrences,
        seen.size(), repeats, repeatBytes / 1e6, seen.values().stream().filter(n -> n > 1).count());
    StringBuilder s = new StringBuilder();
    repeatsByLength.forEach((len, n) -> s.append(String.format(Locale.ROOT, " %dx%d B", n[0], len)));
    System.out.printf(Locale.ROOT, "%s repeats by length:%s%n", tag, s);
    System.out.printf(Locale.ROOT, "%s run order (the host cache's) on the device: %d gaps between allocations "
        + "(%.2f MB), %d jumps back%n", tag, gaps, gapBytes / 1e6, jumps);
  }

  /** The cache's layout of the image: bytes held for it and its runs. */
  private static void layout(String p, ImageManifest m, ChunkPlacement placement, HostImageCache cache) {
    HostImageCache.Stats st = cache.stats();
    System.out.printf(Locale.ROOT, "%s host cache: %d uses placed, %.2f MB of distinct chunks in %.2f MB of the arena "
        + "(%.2f MB held again), %d runs in restore order%n", p, placement.entries().size(), placement.bytes() / 1e6,
        placement.arenaBytes() / 1e6, st.heldAgainBytes() / 1e6, placement.runs());
  }

  /** On-demand cold restores with the request; returns the copies the first reported one queued. */
  private static List<OnDemandRestore.Copy> restores(String tag, ImageManifest m, RocksChunkStore store, GpuContext ctx,
      PinnedChunks chunks, RestoreResources resources, FunctionRequest request, int runs) throws Exception {
    List<OnDemandRestore.Copy> first = List.of();
    RestorePlan plan = RestorePlan.of(m);
    OnDemandRestorer restorer = new OnDemandRestorer(store);
    HostCacheSource source = HostCacheSource.of(chunks);
    // Two rounds first, as a pooled worker's rehearsal warms its code paths; they are not reported.
    for (int i = -2; i < runs; i++) {
      PreparedRestore prepared = restorer.prepare(plan, ctx, source);
      long t0 = System.nanoTime();
      try (OnDemandRestore r = restorer.restore(prepared, source, resources, new OnDemandOptions())) {
        double ready = (System.nanoTime() - t0) / 1e6;
        r.function().invoke(request);
        double response = (System.nanoTime() - t0) / 1e6;
        r.awaitResident();
        double resident = (r.residentNanos() - t0) / 1e6;
        if (i < 0) {
          continue;
        }
        OnDemandRestore.Stats s = r.stats();
        List<OnDemandRestore.Copy> log = r.copyLog();
        long promoted = log.stream().filter(OnDemandRestore.Copy::promoted).count();
        System.out.printf(Locale.ROOT, "%s on-demand restore %d: ready %.2f ms, first response %.2f ms, all resident "
            + "%.2f ms (%.1f GB/s); %d copies in %d runs (%d copies queued by launches), %d promotions, %d waits%n",
            tag, i + 1, ready, response, resident, s.hostBytes() / (resident * 1e6), s.copies(), s.runs(), promoted,
            s.promotions(), s.waits());
        if (i == 0) {
          first = log;
          System.out.printf(Locale.ROOT, "%s on-demand copy sizes: %s%n", tag,
              histogram(log.stream().mapToLong(OnDemandRestore.Copy::bytes).toArray()));
        }
      }
    }
    return first;
  }

  /** A copy list to replay: its copies, and after which of them an event is recorded. */
  private record Replay(String name, List<CoalescedCopies.Copy> copies, boolean[] eventAfter) {}

  /**
   * Copy lists replayed back to back on one stream, timed by events around each: the restore's own copies with an
   * event after each run (as it queued them, its host threads and the launches taken away); the same without events;
   * one copy per allocation with an event after each (what a restore queues when every allocation is promoted alone:
   * the restore before the runs); and the whole image coalesced, no events (the floor for this layout).
   */
  private static void replay(String p, ImageManifest m, GpuContext ctx, PinnedChunks chunks, ChunkPlacement placement,
      List<OnDemandRestore.Copy> log) {
    Map<Long, Long> hostAt = new HashMap<>();
    placement.entries().forEach(e -> hostAt.putIfAbsent(e.device(), e.offset()));
    dev.thaw.runtime.gpu.PinnedBuffer arena = chunks.find(placement.entries().get(0).digest()).orElseThrow().buffer();
    List<CoalescedCopies.Copy> restored = new ArrayList<>();
    boolean[] runEnds = new boolean[log.size()];
    for (int i = 0; i < log.size(); i++) {
      OnDemandRestore.Copy c = log.get(i);
      Long at = hostAt.get(c.device());
      if (at == null) {
        System.out.printf(Locale.ROOT, "%s replay skipped: a copy to 0x%x starts at no chunk%n", p, c.device());
        return;
      }
      restored.add(new CoalescedCopies.Copy(c.device(), arena, at, c.bytes()));
      runEnds[i] = i + 1 == log.size() || log.get(i + 1).run() != c.run();
    }
    List<CoalescedCopies.Copy> perAllocation = new ArrayList<>();
    for (ImageManifest.Allocation a : RestorePlan.of(m).runOrder()) {
      perAllocation.addAll(CoalescedCopies.plan(List.of(a), chunks));
    }
    boolean[] every = new boolean[perAllocation.size()];
    Arrays.fill(every, true);
    List<CoalescedCopies.Copy> whole = CoalescedCopies.plan(RestoreOrder.allocations(m), chunks);
    List<Replay> replays = List.of(new Replay("as restored, an event after each run", restored, runEnds),
        new Replay("as restored, no events", restored, new boolean[restored.size()]),
        new Replay("one copy per allocation, an event after each", perAllocation, every),
        new Replay("whole image coalesced, no events", whole, new boolean[whole.size()]));
    try (FunctionSession s = FunctionSession.rebuild(ctx, m.sessionTable(Map.of()));
        GpuStream stream = ctx.createStream();
        GpuEvent start = ctx.createEvent(true); GpuEvent end = ctx.createEvent(true)) {
      List<GpuEvent> marks = new ArrayList<>();
      int most = replays.stream().mapToInt(r -> r.copies().size()).max().orElse(0);
      for (int i = 0; i < most; i++) {
        marks.add(ctx.createEvent(true));
      }
      try {
        for (Replay r : replays) {
          long bytes = CoalescedCopies.bytes(r.copies());
          int events = 0;
          double[] ms = new double[5];
          for (int k = 0; k < ms.length; k++) {
            start.record(stream);
            events = 0;
            for (int i = 0; i < r.copies().size(); i++) {
              CoalescedCopies.Copy c = r.copies().get(i);
              stream.copyHostToDeviceAsync(c.device(), c.source(), c.sourceOffset(), c.bytes());
              if (r.eventAfter()[i]) {
                marks.get(events++).record(stream);
              }
            }
            end.record(stream);
            end.synchronize();
            ms[k] = end.elapsedMillisSince(start);
          }
          Arrays.sort(ms);
          System.out.printf(Locale.ROOT, "%s replay, %s: %d copies, %d events, %.1f MB in %.2f ms median = %.1f GB/s "
              + "(best %.2f ms)%n", p, r.name(), r.copies().size(), events, bytes / 1e6, ms[ms.length / 2],
              bytes / (ms[ms.length / 2] * 1e6), ms[0]);
        }
      } finally {
        marks.forEach(GpuEvent::close);
      }
    }
  }

  /** Copies by size class: how many, and the bytes they move. */
  static String histogram(long[] sizes) {
    long[] bounds = {64 << 10, 256 << 10, 1 << 20, 4 << 20, Long.MAX_VALUE};
    String[] names = {"<64K", "64K-256K", "256K-1M", "1M-4M", ">=4M"};
    int[] n = new int[bounds.length];
    long[] b = new long[bounds.length];
    for (long s : sizes) {
      int k = 0;
      while (s >= bounds[k]) {
        k++;
      }
      n[k]++;
      b[k] += s;
    }
    StringBuilder out = new StringBuilder();
    for (int k = 0; k < bounds.length; k++) {
      out.append(String.format(Locale.ROOT, "%s%s %d (%.1f MB)", k == 0 ? "" : ", ", names[k], n[k], b[k] / 1e6));
    }
    return out.toString();
  }
}
