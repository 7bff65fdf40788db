package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.Worker;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * Thaw's serving cold path without HTTP: a warm worker of the context pool (JVM started, CUDA context made,
 * store open, host cache registered) is acquired, becomes the image and serves the request; then it is released
 * and exits, and the next cold start takes a fresh worker. The clock starts at {@code acquire}, with the pool
 * idle. The worker restores on demand (the pool's default: BECOME answers once the function can run, each launch
 * waits on the device for what it touches, the rest streams behind) or, for the baseline, fully (BECOME answers
 * when every byte is on the device). Tiers the image is restored from:
 * <ul>
 *   <li>{@code thaw-pool-cold} (on demand), {@code thaw-pool-cold-full}: the store on local disk, every chunk
 *       read and verified;
 *   <li>{@code thaw-pool-cold-cache} (on demand): the pinned host image cache, the image staged (read and
 *       verified) into it before the clock starts, as a server keeps its hot images; a worker that falls back to
 *       the store fails the contender rather than be counted as the cache.
 * </ul>
 * Phases: acquire; the worker's own restore phases; what the BECOME round trip adds to them (frames, the
 * parent's reader); the request's round trip.
 */
final class ThawPoolColdContender implements Contender {

  static final String ID = "thaw-pool-cold";
  static final String FULL_ID = "thaw-pool-cold-full";
  static final String CACHE_ID = "thaw-pool-cold-cache";

  /** Entries of a BECOME's phases that are no times (the host-cache restore reports its copies and their rate). */
  private static final java.util.Set<String> NOT_TIMES = java.util.Set.of("copies", "bytes");

  private final boolean fromHostCache;
  private final boolean full;

  /** {@code full}: the worker answers BECOME only when every byte is on the device (else on demand). */
  ThawPoolColdContender(boolean fromHostCache, boolean full) {
    this.fromHostCache = fromHostCache;
    this.full = full;
  }

  @Override
  public String id() {
    return fromHostCache ? CACHE_ID : full ? FULL_ID : ID;
  }

  @Override
  public String label() {
    return "Thaw, pooled worker, cold from the " + (fromHostCache ? "host cache" : "store")
        + (full ? ", full restore" : ", on-demand restore");
  }

  @Override
  public boolean sweeps() {
    return true;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    return Optional.empty();
  }

  @Override
  public List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException {
    String tag = model.requireTag();
    byte[] manifest = bench.pool().manifest(tag);
    byte[] request = readRequest(model);
    if (!fromHostCache && !full) {
      return runs(bench.pool(), model, null, manifest, request, runs, null);
    }
    if (!fromHostCache) {
      try (HarnessPool pool = new HarnessPool(bench.pool(), null, true)) {
        return runs(pool, model, null, manifest, request, runs, null);
      }
    }
    // The cache is made for this model's image (the workers map and register all of it at their start), with a
    // pool of its own whose workers map it.
    long capacity = (model.imageBytes() * 5 / 4 + (64L << 20)) & -HostCacheOptions.ALIGNMENT;
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().capacityBytes(capacity));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(bench.pool().store()).setReadOnly(true));
        HarnessPool pool = new HarnessPool(bench.pool(), cache.path(), full)) {
      ImageManifest parsed = ImageManifest.read(manifest);
      // As the server does at registration: staged once, then every idle worker prepares it. A worker takes over
      // the lease it becomes the image with, and closes it once resident: one lease per run, a pin per extent of
      // the stage (staged again only if the cache moved it).
      PreparedImage prepared;
      try (CacheLease staged = cache.stage(tag, parsed, store)) {
        prepared = new PreparedImage(tag + "@harness", tag, manifest, staged.placement());
      }
      pool.ready().prepare(prepared);
      Supplier<CacheLease> leases = () -> {
        CacheLease pinned = cache.lease(tag, parsed);
        return pinned != null ? pinned : cache.stage(tag, parsed, store);
      };
      return runs(pool, model, prepared, manifest, request, runs, leases);
    } catch (IOException | RuntimeException e) {
      if (e instanceof PoolException) {
        throw new ContenderException("the pooled worker failed: " + e.getMessage(), e);
      }
      throw new ContenderException("the host cache: " + e, e);
    }
  }

  /** @param prepared the image as the pool's workers prepared it, or null to send it whole (tag {@code model}'s) */
  private List<Sample> runs(HarnessPool harnessPool, PreparedModel model, PreparedImage prepared, byte[] manifest,
      byte[] request, int runs, Supplier<CacheLease> leases) throws ContenderException, InterruptedException {
    String tag = prepared != null ? prepared.name() : model.requireTag();
    List<Sample> samples = new ArrayList<>();
    for (int i = 0; i < runs; i++) {
      CacheLease lease = leases == null ? null : leases.get();
      ImageSource source = lease == null ? ImageSource.store(harnessPool.store())
          : ImageSource.hostCache(lease, harnessPool.store());
      ContextPool pool = harnessPool.ready();
      try {
        long t0 = System.nanoTime();
        Worker w = pool.acquire();
        long t1 = System.nanoTime();
        try {
          BecomeResult b = prepared != null ? w.becomeBlocking(prepared, source)
              : w.becomeBlocking(tag, manifest, source);
          long t2 = System.nanoTime();
          if (!b.source().equals(source.kind())) {
            throw new ContenderException("the worker restored from " + b.source() + ", not from the " + source.kind());
          }
          InvokeResult r = w.invokeBlocking(request);
          long t3 = System.nanoTime();
          Map<String, Double> phases = new LinkedHashMap<>();
          Map<String, Double> extra = new LinkedHashMap<>();
          phases.put("acquire", ms(t0, t1));
          double inside = 0;
          for (Map.Entry<String, Double> e : b.phases().entrySet()) {
            if (NOT_TIMES.contains(e.getKey()) || e.getKey().endsWith("GBps")) {
              extra.put(e.getKey(), e.getValue()); // a count or a rate beside the times
            } else if (!e.getKey().equals("total")) {
              phases.put(e.getKey(), e.getValue());
              inside += e.getValue();
            }
          }
          phases.put("become round trip", Math.max(0, ms(t1, t2) - inside));
          phases.put("invoke (round trip)", ms(t2, t3));
          extra.put("restoredBytes", (double) b.bytes());
          if (lease != null) {
            extra.put("stageMillis", lease.stageMillis());
          }
          samples.add(new Sample(ms(t0, t3), phases, model.workload().answerOf(r.jsonTree()), null, extra));
        } finally {
          w.release();
        }
      } catch (PoolException e) {
        throw new ContenderException("the pooled worker failed: " + e.getMessage(), e);
      }
    }
    return samples;
  }

  static byte[] readRequest(PreparedModel model) throws ContenderException {
    try {
      return Files.readAllBytes(model.request());
    } catch (IOException e) {
      throw new ContenderException("cannot read " + model.request() + ": " + e.getMessage(), e);
    }
  }

  static double ms(long from, long to) {
    return (to - from) / 1e6;
  }
}
