package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * PyTorch from scratch: a fresh {@code python3} that imports torch (and transformers for GPT-2), initialises
 * CUDA, loads the same safetensors weights Thaw's image was built from, uploads them and answers the request
 * ({@code coldstart.py scratch}). What a serverless platform without checkpoints pays on every cold start.
 * The script times its own phases; what is left of the time to first response is the interpreter's start.
 */
final class PytorchScratchContender implements Contender {

  static final String ID = "pytorch-scratch";

  @Override
  public String id() {
    return ID;
  }

  @Override
  public String label() {
    return "PyTorch from scratch (python3)";
  }

  @Override
  public boolean sweeps() {
    return false;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    return bench.pythonUnavailable();
  }

  @Override
  public List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException {
    List<Sample> samples = new ArrayList<>();
    for (int i = 0; i < runs; i++) {
      Child c;
      try {
        c = Child.run(bench.python().command("scratch", "--kind", model.workload().kind().pythonKind, "--weights",
            model.weights().toString(), "--request", model.request().toString()), Map.of(), bench.childTimeout());
      } catch (IOException e) {
        throw new ContenderException("coldstart.py scratch: " + e.getMessage(), e);
      }
      if (c.exit() != 0) {
        throw new ContenderException(c.failure());
      }
      JsonNode out;
      try {
        out = Lines.last(c.stdout());
      } catch (IOException e) {
        throw new ContenderException("coldstart.py scratch " + e.getMessage(), e);
      }
      samples.add(sample(c, out));
    }
    return samples;
  }

  static Sample sample(Child c, JsonNode out) {
    double ttfr = c.firstOutputMillis();
    Map<String, Double> measured = new LinkedHashMap<>();
    out.path("phases").fields().forEachRemaining(e -> measured.put(e.getKey(), e.getValue().asDouble()));
    double sum = measured.values().stream().mapToDouble(Double::doubleValue).sum();
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("python start", Math.max(0, ttfr - sum));
    phases.putAll(measured);
    Double gap = out.path("gap").isNumber() ? out.path("gap").asDouble() : null;
    return new Sample(ttfr, phases, out.path("answer"), gap, Map.of("exitMillis", c.exitMillis()));
  }
}
