package dev.thaw.bench.pool;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.RestoreCompletion;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerStart;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmTier;
import dev.thaw.pool.hbm.HbmTierOptions;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * What the context pool costs, measured end to end with real worker processes on the device {@code
 * THAW_DEVICE} picks (on the sim device every number is a simulated number):
 *
 * <ul>
 *   <li>worker spawn-to-ready and its phases (JVM start, driver open = {@code cuInit}, context, streams, store
 *       open, host cache registration, warm-up);
 *   <li>{@code acquire()} latency (acquire + release of a blank worker, many times; the acquire is timed);
 *   <li>per image and per source (store, host cache): store → cache staging; BECOME until the function is
 *       invocable (on-demand restore: map, modules, state); the first invoke, gated on residency; the whole cold
 *       path acquire → become → first response; when the last byte landed (GB/s over the whole image); and
 *       invokes once resident;
 *   <li>with a host cache, also {@code hbm}: a prepared image whose read-only slabs an evicted worker left on the
 *       device ({@link HbmTier}), as {@code thaw serve --hbm-tier} restores it from its second cold start on.
 * </ul>
 *
 * <p>Usage: {@code PoolBench --store DIR [--image TAG=REQUEST.json]... [--runs 3] [--acquires 20000]
 * [--cache-bytes 4294967296] [--out result.json]}. Prints a table and writes the numbers as JSON.
 */
public final class PoolBench {

  private static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
  private static final Duration WAIT = Duration.ofSeconds(120);

  private record Image(String tag, byte[] request) {}

  public static void main(String[] args) throws Exception {
    Path store = null;
    List<Image> images = new ArrayList<>();
    int runs = 3;
    int acquires = 20_000;
    long cacheBytes = 4L << 30;
    Path out = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--store" -> store = Path.of(args[++i]);
        case "--image" -> {
          String[] kv = args[++i].split("=", 2);
          images.add(new Image(kv[0], Files.readAllBytes(Path.of(kv[1]))));
        }
        case "--runs" -> runs = Integer.parseInt(args[++i]);
        case "--acquires" -> acquires = Integer.parseInt(args[++i]);
        case "--cache-bytes" -> cacheBytes = Long.parseLong(args[++i]);
        case "--out" -> out = Path.of(args[++i]);
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (store == null) {
      throw new IllegalArgumentException("--store DIR is required");
    }
    ObjectNode result = JSON.createObjectNode();
    try (HostImageCache cache = cacheBytes > 0
        ? HostImageCache.create(new HostCacheOptions().setCapacityBytes(cacheBytes)) : null;
        RocksChunkStore reader = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      ContextPoolOptions o = new ContextPoolOptions().setIdleTarget(2).setMaxWorkers(4).setStorePath(store)
          .setHostCachePath(cache == null ? null : cache.path());
      result.set("options", o.toJson());
      long t0 = System.nanoTime();
      try (ContextPool pool = ContextPool.create(o)) {
        if (!pool.awaitIdle(WAIT)) {
          throw new IllegalStateException("the pool did not fill in " + WAIT + ": " + pool.stats());
        }
        System.out.printf(Locale.ROOT, "pool of %d ready %.0f ms after create%n", o.idleTarget(),
            (System.nanoTime() - t0) / 1e6);
        result.set("starts", starts(pool));
        result.set("acquire", acquireLatency(pool, acquires));
        ArrayNode perImage = result.putArray("images");
        for (Image image : images) {
          byte[] manifest = reader.manifest(image.tag()).orElseThrow(
              () -> new IllegalArgumentException("no image " + image.tag() + " in " + reader.path()));
          List<String> sources = cache == null ? List.of("store", "prepared")
              : List.of("store", "cache", "prepared", "hbm");
          try (HbmTier tier = new HbmTier(new HbmTierOptions())) {
            for (String source : sources) {
              perImage.add(coldRuns(pool, cache, tier, reader, store, image, manifest, source, runs));
            }
          }
        }
      }
    }
    if (out != null) {
      Files.write(out, JSON.writeValueAsBytes(result));
    }
  }

  private static ArrayNode starts(ContextPool pool) {
    ArrayNode starts = JSON.createArrayNode();
    List<Worker> taken = new ArrayList<>();
    for (int i = 0; i < pool.options().idleTarget(); i++) {
      taken.add(pool.acquire());
    }
    for (Worker w : taken) {
      WorkerStart s = w.start();
      starts.add(JSON.valueToTree(s));
      StringBuilder line = new StringBuilder(String.format(Locale.ROOT,
          "worker %d (%s%s): spawn to ready %.1f ms =", s.pid(), s.driver(), s.simulated() ? ", SIMULATED" : "",
          s.spawnToReadyMillis()));
      s.phases().forEach((k, v) -> line.append(String.format(Locale.ROOT, " %s %.1f", k, v)));
      System.out.println(line);
      w.release();
    }
    return starts;
  }

  private static ObjectNode acquireLatency(ContextPool pool, int n) {
    long[] ns = new long[n];
    for (int i = 0; i < n; i++) {
      long t = System.nanoTime();
      Worker w = pool.acquire();
      ns[i] = System.nanoTime() - t;
      w.release();
    }
    Arrays.sort(ns);
    ObjectNode a = JSON.createObjectNode();
    a.put("count", n);
    a.put("p50Micros", ns[n / 2] / 1e3);
    a.put("p99Micros", ns[(int) (n * 0.99)] / 1e3);
    a.put("maxMicros", ns[n - 1] / 1e3);
    System.out.printf(Locale.ROOT, "acquire(): p50 %.2f us, p99 %.2f us, max %.1f us (%d acquires of an idle worker)%n",
        a.get("p50Micros").asDouble(), a.get("p99Micros").asDouble(), a.get("maxMicros").asDouble(), n);
    return a;
  }

  /**
   * What {@code thaw serve} does when an instance of a staged image is evicted: a worker becomes it from the host
   * cache with its read-only slabs created exportable, runs the request, and hands the slabs to {@code tier}. False
   * when the image has no read-only slab (its weights share every page with written buffers, as a small MLP's do).
   */
  private static boolean seedTier(ContextPool pool, HostImageCache cache, HbmTier tier, RocksChunkStore reader,
      Path store, Image image, byte[] manifestBytes) throws Exception {
    ImageManifest manifest = ImageManifest.read(manifestBytes);
    Worker w = pool.acquire();
    try (CacheLease lease = cache.stage(image.tag(), manifest, reader)) {
      w.becomeBlocking(image.tag(), manifestBytes, ImageSource.hostCache(lease, store).withResident(List.of()));
      w.invokeBlocking(image.request());
      w.resident().get();
      List<ExportedSlab> slabs = w.exportReadOnly().get();
      if (slabs.isEmpty()) {
        System.out.printf(Locale.ROOT, "%s: no read-only slab to leave on the device; no HBM-tier runs%n",
            image.tag());
        return false;
      }
      if (!tier.offer(image.tag(), w.pid(), slabs)) {
        throw new IllegalStateException(image.tag() + ": the HBM tier refused " + ExportedSlab.bytes(slabs)
            + " bytes");
      }
      System.out.printf(Locale.ROOT, "%s: %d read-only slab(s), %d MB, left on the device for the HBM tier%n",
          image.tag(), slabs.size(), ExportedSlab.bytes(slabs) >> 20);
      return true;
    } finally {
      w.release();
    }
  }

  private static ObjectNode coldRuns(ContextPool pool, HostImageCache cache, HbmTier tier, RocksChunkStore reader,
      Path store, Image image, byte[] manifestBytes, String source, int runs) throws Exception {
    if (source.equals("hbm")) {
      if (!pool.awaitIdle(WAIT)) {
        throw new IllegalStateException("the pool did not refill: " + pool.stats());
      }
      if (!seedTier(pool, cache, tier, reader, store, image, manifestBytes)) {
        ObjectNode skipped = JSON.createObjectNode();
        skipped.put("image", image.tag());
        skipped.put("source", source);
        skipped.put("skipped", "no read-only slab");
        return skipped;
      }
    }
    ObjectNode node = JSON.createObjectNode();
    node.put("image", image.tag());
    node.put("source", source);
    node.put("prepared", source.equals("prepared") || source.equals("hbm"));
    ArrayNode list = node.putArray("runs");
    ImageManifest manifest = ImageManifest.read(manifestBytes);
    for (int r = 0; r < runs; r++) {
      if (!pool.awaitIdle(WAIT)) {
        throw new IllegalStateException("the pool did not refill: " + pool.stats());
      }
      CacheLease lease = null;
      ObjectNode run = list.addObject();
      PreparedImage prepared = null;
      if (source.equals("prepared") || source.equals("hbm")) {
        // As the server does at registration: staged, then every idle worker prepares it; the cold start begins once
        // they are done (a PREPARE still running would be waited for by the BECOME).
        ChunkPlacement placement = null;
        if (cache != null) {
          try (CacheLease staged = cache.stage(image.tag(), manifest, reader)) {
            placement = staged.placement();
          }
        }
        prepared = new PreparedImage(image.tag() + "@bench", image.tag(), manifestBytes, placement);
        pool.prepare(prepared);
        if (!pool.awaitPrepared(WAIT)) {
          throw new IllegalStateException("the pool's workers did not prepare " + image.tag() + ": " + pool.stats());
        }
        lease = cache == null ? null : cache.lease(image.tag(), manifest);
      }
      if (source.equals("cache")) {
        lease = cache.stage(image.tag(), manifest, reader);
        run.put("stageMillis", lease.stageMillis());
        run.put("stagedBytes", lease.stagedBytes());
        if (lease.stagedBytes() > 0) {
          run.put("storeToCacheGBps", lease.stagedBytes() / (lease.stageMillis() * 1e6));
        }
      }
      long t0 = System.nanoTime();
      Worker w = pool.acquire();
      long acquired = System.nanoTime();
      BecomeResult b;
      InvokeResult first;
      double coldMs;
      RestoreCompletion done;
      try {
        ImageSource from = lease == null ? ImageSource.store(store) : ImageSource.hostCache(lease, store);
        if (source.equals("hbm")) {
          from = from.withResident(tier.slabs(image.tag()).orElseThrow());
        }
        b = prepared != null ? w.becomeBlocking(prepared, from) : w.becomeBlocking(image.tag(), manifestBytes, from);
        first = w.invokeBlocking(image.request());
        coldMs = (System.nanoTime() - t0) / 1e6;
        done = w.resident().get();
      } finally {
        if (lease != null) {
          lease.close(); // the restore reads the arena until resident
        }
      }
      InvokeResult second = w.invokeBlocking(image.request());
      InvokeResult third = w.invokeBlocking(image.request());
      w.release();
      run.put("acquireMicros", (acquired - t0) / 1e3);
      run.put("becomeSource", b.source());
      run.set("become", JSON.valueToTree(b.phases()));
      run.put("becomeRoundTripMillis", b.roundTripMillis());
      run.put("bytes", b.bytes());
      run.put("firstInvokeMillis", first.phases().get("invoke"));
      run.put("firstInvokeRoundTripMillis", first.roundTripMillis());
      run.put("secondInvokeMillis", second.phases().get("invoke"));
      run.put("thirdInvokeMillis", third.phases().get("invoke"));
      run.put("coldMillis", coldMs);
      run.set("resident", JSON.valueToTree(done));
      run.put("residentGBps", done.bytes() / (done.sinceBecomeMillis() * 1e6));
      run.put("response", new String(first.json(), StandardCharsets.UTF_8).length() > 200
          ? new String(first.json(), 0, 200, StandardCharsets.UTF_8) + "…"
          : new String(first.json(), StandardCharsets.UTF_8));
      Map<String, Double> p = b.phases();
      System.out.printf(Locale.ROOT,
          "%s from %s%s run %d: cold %.1f ms = acquire %.0f us + become %.1f ms (%s) + first invoke %.2f ms "
              + "(in worker %.2f; resident then: %.2f, %.2f); all bytes resident %.1f ms after BECOME began "
              + "(%.2f GB/s; %d MB host, %d MB store, %d copies, %d waits)%s%n",
          image.tag(), b.source(), prepared != null ? " (prepared)" : "", r + 1, coldMs, (acquired - t0) / 1e3, b.roundTripMillis(), phasesLine(p),
          first.roundTripMillis(), first.phases().get("invoke"), second.phases().get("invoke"),
          third.phases().get("invoke"), done.sinceBecomeMillis(), run.get("residentGBps").asDouble(),
          done.hostBytes() >> 20, done.storeBytes() >> 20, done.copies(), done.waits(),
          run.has("storeToCacheGBps") ? String.format(Locale.ROOT,
              "; staged store->cache %.2f GB/s", run.get("storeToCacheGBps").asDouble()) : "");
    }
    return node;
  }

  private static String phasesLine(Map<String, Double> p) {
    Map<String, Double> m = new LinkedHashMap<>(p);
    StringBuilder s = new StringBuilder();
    m.forEach((k, v) -> {
      if (s.length() > 0) {
        s.append(", ");
      }
      s.append(k).append(' ').append(k.equals("copies") ? String.format(Locale.ROOT, "%.0f", v)
          : String.format(Locale.ROOT, "%.2f", v));
    });
    return s.toString();
  }
}
