package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.RestoreCompletion;
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
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
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
 *   <li>{@code thaw-pool-cold-multilink} (on demand, two GPUs or more): the host cache, the worker on GPU 0 restoring
 *       through its own link and every other GPU's it holds a link to (multi-link restore: those GPUs idle), as a
 *       server's cold start does on an idle node; a worker that restores through its own link alone fails it.
 * </ul>
 * Phases: acquire; the worker's own restore phases; what the BECOME round trip adds to them (frames, the
 * parent's reader); the request's round trip.
 */
final class ThawPoolColdContender implements Contender {

  static final String ID = "thaw-pool-cold";
  static final String FULL_ID = "thaw-pool-cold-full";
  static final String CACHE_ID = "thaw-pool-cold-cache";
  static final String MULTILINK_ID = "thaw-pool-cold-multilink";

  /** Entries of a BECOME's phases that are no times (the host-cache restore reports its copies and their rate). */
  private static final Set<String> NOT_TIMES = Set.of("copies", "bytes");

  private final boolean fromHostCache;
  private final boolean full;
  private final boolean multiLink;

  /** {@code full}: the worker answers BECOME only when every byte is on the device (else on demand). */
  ThawPoolColdContender(boolean fromHostCache, boolean full) {
    this(fromHostCache, full, false);
  }

  /** {@code multiLink}: from the host cache through every GPU's link (on demand). */
  ThawPoolColdContender(boolean fromHostCache, boolean full, boolean multiLink) {
    this.fromHostCache = fromHostCache || multiLink;
    this.full = full;
    this.multiLink = multiLink;
  }

  @Override
  public String id() {
    return multiLink ? MULTILINK_ID : fromHostCache ? CACHE_ID : full ? FULL_ID : ID;
  }

  @Override
  public String label() {
    return "Thaw, pooled worker, cold from the " + (multiLink ? "host cache through every GPU's link"
        : fromHostCache ? "host cache" : "store") + (full ? ", full restore" : ", on-demand restore");
  }

  @Override
  public boolean sweeps() {
    return true;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    if (!multiLink) {
      return Optional.empty();
    }
    String device = bench.pool().device();
    int devices = HarnessPool.deviceCount(device);
    return devices >= 2 || devices == 0 && !device.equals("sim") ? Optional.empty()
        : Optional.of("one device here (" + (device.equals("sim") ? "THAW_SIM_DEVICES" : "nvidia-smi -L")
            + "): no other GPU's link to restore through");
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
      try (HarnessPool pool = new HarnessPool(bench.pool(), null, true, 0)) {
        return runs(pool, model, null, manifest, request, runs, null);
      }
    }
    // The cache is made for this model's image (the workers map and register all of it at their start), with a
    // pool of its own whose workers map it.
    long capacity = (model.imageBytes() * 5 / 4 + (64L << 20)) & -HostCacheOptions.ALIGNMENT;
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(capacity));
        RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(bench.pool().store()).setReadOnly(true));
        HarnessPool pool = new HarnessPool(bench.pool(), cache.path(), full,
            multiLink ? ContextPoolOptions.DEFAULT_HELPER_LINKS : 0)) {
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
          if (multiLink) {
            if (w.helperLinks().isEmpty()) {
              throw new ContenderException("the worker on GPU 0 holds no link to another GPU (its log says why)");
            }
            source = source.withHelpers(w.helperLinks(), OnDemandOptions.DEFAULT_HELPER_SHARE);
          }
          BecomeResult b = prepared != null ? w.becomeBlocking(prepared, source)
              : w.becomeBlocking(tag, manifest, source);
          long t2 = System.nanoTime();
          if (!b.source().equals(source.kind())) {
            throw new ContenderException("the worker restored from " + b.source() + ", not from the " + source.kind());
          }
          if (multiLink && b.helpers().isEmpty()) {
            throw new ContenderException("the worker restored through its own link alone (links " + w.helperLinks()
                + " not lent)");
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
          if (multiLink) {
            // Off the clock: what the other links carried, once every byte landed.
            RestoreCompletion done = w.resident().get(10, TimeUnit.MINUTES);
            extra.put("helperBytes", (double) done.helperBytes());
            extra.put("residentMillis", done.sinceBecomeMillis());
          }
          samples.add(new Sample(ms(t0, t3), phases, model.workload().answerOf(r.jsonTree()), null, extra));
        } finally {
          w.release();
        }
      } catch (PoolException e) {
        throw new ContenderException("the pooled worker failed: " + e.getMessage(), e);
      } catch (ExecutionException | TimeoutException e) {
        throw new ContenderException("the pooled worker's restore did not complete: " + e, e);
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
