package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.Worker;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * The floor every cold start is measured against: a pooled worker that already became the image and has
 * served a request answers the same request again. One worker per model; each sample is one request's round
 * trip from the parent (the worker's decode, invoke and encode, and the frames between).
 */
final class ThawPoolWarmContender implements Contender {

  static final String ID = "thaw-pool-warm";

  @Override
  public String id() {
    return ID;
  }

  @Override
  public String label() {
    return "Thaw, pooled worker, warm (invoke)";
  }

  @Override
  public boolean sweeps() {
    return false;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    return Optional.empty();
  }

  @Override
  public List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException {
    String tag = model.requireTag();
    byte[] manifest = bench.pool().manifest(tag);
    byte[] request = ThawPoolColdContender.readRequest(model);
    List<Sample> samples = new ArrayList<>();
    try {
      Worker w = bench.pool().ready().acquire();
      try {
        w.becomeBlocking(tag, manifest, ImageSource.store(bench.pool().store()));
        w.invokeBlocking(request); // the first request after the restore is no warm one
        for (int i = 0; i < runs; i++) {
          long t0 = System.nanoTime();
          InvokeResult r = w.invokeBlocking(request);
          double ttfr = ThawPoolColdContender.ms(t0, System.nanoTime());
          Map<String, Double> phases = new LinkedHashMap<>(r.phases());
          double inside = r.phases().values().stream().mapToDouble(Double::doubleValue).sum();
          phases.put("round trip", Math.max(0, ttfr - inside));
          samples.add(new Sample(ttfr, phases, model.workload().answerOf(r.jsonTree()), null, null));
        }
      } finally {
        w.release();
      }
    } catch (PoolException e) {
      throw new ContenderException("the pooled worker failed: " + e.getMessage(), e);
    }
    return samples;
  }
}
