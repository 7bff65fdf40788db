package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.Worker;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Thaw's serving cold path without HTTP: a warm worker of the context pool (JVM started, CUDA context made,
 * store open) is acquired, becomes the image (a full restore from the store, every chunk verified) and serves
 * the request; then it is released and exits, and the next cold start takes a fresh worker. The clock starts
 * at {@code acquire}, with the pool idle. Phases: acquire; the worker's own restore phases; what the BECOME
 * round trip adds to them (frames, the parent's reader); the request's round trip.
 */
final class ThawPoolColdContender implements Contender {

  static final String ID = "thaw-pool-cold";

  @Override
  public String id() {
    return ID;
  }

  @Override
  public String label() {
    return "Thaw, pooled worker, cold (acquire + restore + invoke)";
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
    List<Sample> samples = new ArrayList<>();
    for (int i = 0; i < runs; i++) {
      ContextPool pool = bench.pool().ready();
      try {
        long t0 = System.nanoTime();
        Worker w = pool.acquire();
        long t1 = System.nanoTime();
        try {
          BecomeResult b = w.becomeBlocking(tag, manifest, ImageSource.store(bench.pool().store()));
          long t2 = System.nanoTime();
          InvokeResult r = w.invokeBlocking(request);
          long t3 = System.nanoTime();
          Map<String, Double> phases = new LinkedHashMap<>();
          phases.put("acquire", ms(t0, t1));
          double inside = 0;
          for (Map.Entry<String, Double> e : b.phases().entrySet()) {
            if (!e.getKey().equals("total")) {
              phases.put(e.getKey(), e.getValue());
              inside += e.getValue();
            }
          }
          phases.put("become round trip", Math.max(0, ms(t1, t2) - inside));
          phases.put("invoke (round trip)", ms(t2, t3));
          samples.add(new Sample(ms(t0, t3), phases, model.workload().answerOf(r.jsonTree()), null,
              Map.of("restoredBytes", (double) b.bytes())));
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
