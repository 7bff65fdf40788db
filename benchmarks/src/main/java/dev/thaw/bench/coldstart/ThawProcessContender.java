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
 * Thaw in a fresh process: {@code thaw run TAG --request FILE --json}, a full restore of the image into a new
 * JVM and a new CUDA context, then the request. Its phases come from the command's own JSON: the restore's
 * phases, the invocation, opening the driver, the store and the context ({@code setupMillis}); what is left
 * of the time to first response is the JVM's start and the CLI's (and the JSON's) own work.
 */
final class ThawProcessContender implements Contender {

  static final String ID = "thaw-process";
  static final String JVM_PHASE = "JVM + CLI start";

  @Override
  public String id() {
    return ID;
  }

  @Override
  public String label() {
    return "Thaw, fresh process (thaw run)";
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
    List<Sample> samples = new ArrayList<>();
    for (int i = 0; i < runs; i++) {
      Child c;
      try {
        c = Child.run(bench.thaw().command("run", model.requireTag(), "--request", model.request().toString(), "--json"),
            bench.thaw().environment(), bench.childTimeout());
      } catch (IOException e) {
        throw new ContenderException("thaw run: " + e.getMessage(), e);
      }
      if (c.exit() != 0) {
        throw new ContenderException(c.failure());
      }
      samples.add(sample(model.workload(), c));
    }
    return samples;
  }

  static Sample sample(Workload workload, Child c) throws ContenderException {
    if (!c.stdout().stripLeading().startsWith("{")) {
      throw new ContenderException("thaw run printed something before its response, so its first output is no "
          + "time to first response: " + Lines.abbreviate(c.stdout()));
    }
    JsonNode out;
    try {
      out = ColdStartResult.JSON.readTree(c.stdout());
    } catch (IOException e) {
      throw new ContenderException("thaw run --json printed no JSON: " + Lines.abbreviate(c.stdout()), e);
    }
    JsonNode restore = out.path("restore");
    double invoke = out.path("invokeMillis").asDouble();
    double setup = out.path("setupMillis").asDouble(0);
    double ttfr = c.firstOutputMillis();
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put(JVM_PHASE, Math.max(0, ttfr - setup - restore.path("totalMillis").asDouble() - invoke));
    phases.put("driver + store + context", setup);
    phases.put("open manifest", restore.path("openMillis").asDouble());
    phases.put("map allocations", restore.path("mapMillis").asDouble());
    phases.put("load modules", restore.path("modulesMillis").asDouble());
    phases.put("copy + verify", restore.path("copyMillis").asDouble());
    phases.put("rebuild state", restore.path("stateMillis").asDouble());
    phases.put("invoke", invoke);
    Map<String, Double> extra = new LinkedHashMap<>();
    extra.put("exitMillis", c.exitMillis());
    extra.put("restoredBytes", restore.path("bytes").asDouble());
    return new Sample(ttfr, phases, workload.answerOf(out.path("response")), null, extra);
  }
}
