package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Concurrency;
import dev.thaw.bench.coldstart.ColdStartResult.ConcurrencyLevel;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.Worker;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * N cold starts of one image at once, for N in the levels asked, each request's time from the common start to its own
 * answer; a pool of its own keeps the workers idle and refills before each level, so no worker starts while a level is
 * timed.
 * <ul>
 *   <li>{@link #run}: all N on one GPU: N pooled workers, idle and warm, released together; each acquires, becomes the
 *       image (the pool's on-demand restore from the store) and answers the request.
 *   <li>{@link #perGpu}: one on each of N GPUs, from the host cache (the image staged and prepared before, as a server
 *       keeps its hot images), each through its own link (the workers hold no helper links): N GPUs restore at once
 *       at one link's speed each, against level 1, one alone.
 * </ul>
 */
final class ConcurrencySweep {

  private ConcurrencySweep() {}

  static Concurrency run(PreparedModel model, List<Integer> levels, String device, Path store, Duration timeout)
      throws Contender.ContenderException, InterruptedException {
    int most = levels.stream().mapToInt(Integer::intValue).max().orElseThrow();
    byte[] request = ThawPoolColdContender.readRequest(model);
    String tag = model.requireTag();
    byte[] manifest = HarnessPool.manifest(store, tag);
    List<ConcurrencyLevel> results = new ArrayList<>();
    ExecutorService threads = Executors.newFixedThreadPool(most);
    try (ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(most)
        .setMaxWorkers(most + 1).setMaxStarting(2).setDeviceChoice(device).setStorePath(store)
        .setWarmupLaunches(HarnessPool.warmupLaunches(device)))) {
      for (int n : levels) {
        if (!pool.awaitIdle(timeout.multipliedBy(2))) {
          throw new Contender.ContenderException("the pool did not get " + most + " idle workers in "
              + timeout.multipliedBy(2).toSeconds() + " s: " + pool.stats());
        }
        results.add(new ConcurrencyLevel(n, atOnce(n, threads, i -> {
          Worker w = pool.acquire();
          try {
            w.becomeBlocking(tag, manifest, ImageSource.store(store));
            w.invokeBlocking(request);
          } finally {
            w.release();
          }
        })));
      }
    } finally {
      threads.shutdownNow();
    }
    return new Concurrency(model.workload().name(), ThawPoolColdContender.ID, model.imageBytes(), results, null);
  }

  static Concurrency perGpu(PreparedModel model, List<Integer> levels, String device, Path store, Duration timeout)
      throws Contender.ContenderException, InterruptedException {
    int gpus = levels.stream().mapToInt(Integer::intValue).max().orElseThrow();
    byte[] request = ThawPoolColdContender.readRequest(model);
    String tag = model.requireTag();
    byte[] manifest = HarnessPool.manifest(store, tag);
    ImageManifest parsed = ImageManifest.read(manifest);
    long capacity = (model.imageBytes() * 5 / 4 + (64L << 20)) & -HostCacheOptions.ALIGNMENT;
    List<Integer> devices = new ArrayList<>();
    for (int d = 0; d < gpus; d++) {
      devices.add(d);
    }
    List<ConcurrencyLevel> results = new ArrayList<>();
    ExecutorService threads = Executors.newFixedThreadPool(gpus);
    try (HostImageCache cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(capacity));
        RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true));
        ContextPool pool = ContextPool.create(new ContextPoolOptions().setDevices(devices).setIdleTarget(1)
            .setMaxWorkers(2).setMaxStarting(1).setDeviceChoice(device).setStorePath(store)
            .setHostCachePath(cache.path()).setHelperLinks(0).setWarmupLaunches(HarnessPool.warmupLaunches(device)))) {
      PreparedImage prepared;
      try (CacheLease staged = cache.stage(tag, parsed, s)) {
        prepared = new PreparedImage(tag + "@per-gpu", tag, manifest, staged.placement());
      }
      pool.prepare(prepared);
      for (int n : levels) {
        if (!pool.awaitPrepared(timeout.multipliedBy(2))) {
          throw new Contender.ContenderException("the pool did not get an idle worker on each of " + gpus
              + " GPUs in " + timeout.multipliedBy(2).toSeconds() + " s (fewer GPUs than levels ask?): "
              + pool.stats());
        }
        List<CacheLease> leases = new ArrayList<>();
        for (int i = 0; i < n; i++) {
          CacheLease pinned = cache.lease(tag, parsed);
          leases.add(pinned != null ? pinned : cache.stage(tag, parsed, s));
        }
        results.add(new ConcurrencyLevel(n, atOnce(n, threads, gpu -> {
          Worker w = pool.acquire(gpu, timeout);
          try {
            BecomeResult b = w.becomeBlocking(prepared, ImageSource.hostCache(leases.get(gpu), store));
            if (!b.source().equals("cache") || !b.helpers().isEmpty()) {
              throw new IllegalStateException("GPU " + gpu + "'s worker restored from " + b.source() + " through "
                  + b.helpers() + ", not from the host cache through its own link");
            }
            w.invokeBlocking(request);
          } finally {
            w.release();
          }
        })));
      }
    } catch (IOException | RuntimeException e) {
      throw new Contender.ContenderException("one cold start per GPU: " + e.getMessage(), e);
    } finally {
      threads.shutdownNow();
    }
    return new Concurrency(model.workload().name(), ThawPoolColdContender.CACHE_ID, model.imageBytes(), results, null,
        true);
  }

  /** One cold start, the {@code i}-th of its level. */
  private interface ColdStartOf {
    void run(int i) throws Exception;
  }

  /**
   * Runs {@code n} cold starts on {@code threads}, released together: each one's time from the common start to its own
   * answer, in order.
   */
  private static List<Double> atOnce(int n, ExecutorService threads, ColdStartOf coldStart)
      throws Contender.ContenderException, InterruptedException {
    CountDownLatch go = new CountDownLatch(1);
    List<Future<Double>> answers = new ArrayList<>();
    long[] start = new long[1];
    for (int i = 0; i < n; i++) {
      int index = i;
      answers.add(threads.submit(() -> {
        go.await();
        coldStart.run(index);
        return (System.nanoTime() - start[0]) / 1e6;
      }));
    }
    start[0] = System.nanoTime();
    go.countDown();
    List<Double> times = new ArrayList<>();
    for (Future<Double> f : answers) {
      try {
        times.add(f.get());
      } catch (ExecutionException e) {
        Throwable cause = e.getCause();
        throw new Contender.ContenderException(n + " concurrent cold starts: "
            + (cause instanceof PoolException ? cause.getMessage() : cause.toString()), cause);
      }
    }
    return times;
  }
}
