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
 * NVIDIA's driver checkpoint: a PyTorch server holding the model (warm, having answered before) is suspended
 * with {@code cuCheckpointProcessLock} + {@code cuCheckpointProcessCheckpoint} (its GPU memory moves to host
 * memory and the GPU is freed) and resumed with {@code cuCheckpointProcessRestore} +
 * {@code cuCheckpointProcessUnlock}; the cold start is the restore to the first response. A controller process
 * ({@code coldstart.py checkpoint}) calls the driver through ctypes and runs every cycle; each cycle is one
 * sample. The most favourable case for the baseline: the suspended process's host side stays in memory, where a
 * real deployment would also restore it (CRIU) from disk.
 */
final class DriverCheckpointContender implements Contender {

  static final String ID = "driver-checkpoint";

  @Override
  public String id() {
    return ID;
  }

  @Override
  public String label() {
    return "NVIDIA driver checkpoint (cuCheckpointProcessRestore)";
  }

  @Override
  public boolean sweeps() {
    return true;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    return bench.pythonUnavailable().or(bench::checkpointApiMissing);
  }

  @Override
  public List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException {
    Child c;
    try {
      c = Child.run(bench.python().command("checkpoint", "--kind", model.workload().kind().pythonKind, "--weights",
          model.weights().toString(), "--request", model.request().toString(), "--cycles", Integer.toString(runs)),
          Map.of(), bench.childTimeout().multipliedBy(2));
    } catch (IOException e) {
      throw new ContenderException("coldstart.py checkpoint: " + e.getMessage(), e);
    }
    List<JsonNode> lines = Lines.all(c.stdout());
    for (JsonNode line : lines) {
      if (line.has("error")) {
        throw new ContenderException(line.get("error").asText());
      }
    }
    if (c.exit() != 0) {
      throw new ContenderException(c.failure());
    }
    List<Sample> samples = new ArrayList<>();
    for (JsonNode line : lines) {
      if (line.has("cycle")) {
        samples.add(sample(line));
      }
    }
    if (samples.size() != runs) {
      throw new ContenderException("the controller reported " + samples.size() + " cycles, not " + runs);
    }
    return samples;
  }

  static Sample sample(JsonNode line) {
    Map<String, Double> phases = new LinkedHashMap<>();
    line.path("phases").fields().forEachRemaining(e -> phases.put(e.getKey(), e.getValue().asDouble()));
    Map<String, Double> extra = new LinkedHashMap<>();
    extra.put("lockMillis", line.path("lockMs").asDouble());
    extra.put("checkpointMillis", line.path("checkpointMs").asDouble());
    Double gap = line.path("gap").isNumber() ? line.path("gap").asDouble() : null;
    return new Sample(line.path("ttfrMs").asDouble(), phases, line.path("answer"), gap, extra);
  }
}
