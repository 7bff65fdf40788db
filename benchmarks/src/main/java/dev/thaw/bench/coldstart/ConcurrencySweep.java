package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Concurrency;
import dev.thaw.bench.coldstart.ColdStartResult.ConcurrencyLevel;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.Worker;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * N cold starts of one image at once on one GPU, for N in the levels asked: N pooled workers, idle and warm,
 * released together; each acquires, becomes the image (the pool's on-demand restore from the store) and answers
 * the request.
 * Each request's time is from the common start to its own answer. A pool of its own keeps the largest N idle,
 * and refills before each level, so no worker starts while a level is timed.
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
        CountDownLatch go = new CountDownLatch(1);
        List<Future<Double>> answers = new ArrayList<>();
        long[] start = new long[1];
        for (int i = 0; i < n; i++) {
          answers.add(threads.submit(() -> {
            go.await();
            Worker w = pool.acquire();
            try {
              w.becomeBlocking(tag, manifest, ImageSource.store(store));
              w.invokeBlocking(request);
              return (System.nanoTime() - start[0]) / 1e6;
            } finally {
              w.release();
            }
          }));
        }
        start[0] = System.nanoTime();
        go.countDown();
        List<Double> times = new ArrayList<>();
        for (Future<Double> f : answers) {
          try {
            times.add(f.get());
          } catch (java.util.concurrent.ExecutionException e) {
            Throwable cause = e.getCause();
            throw new Contender.ContenderException(n + " concurrent cold starts: "
                + (cause instanceof PoolException ? cause.getMessage() : cause.toString()), cause);
          }
        }
        results.add(new ConcurrencyLevel(n, times));
      }
    } finally {
      threads.shutdownNow();
    }
    return new Concurrency(model.workload().name(), ThawPoolColdContender.ID, model.imageBytes(), results, null);
  }
}
