package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.bench.coldstart.ColdStartResult.AnswerCheck;
import dev.thaw.bench.coldstart.ColdStartResult.Concurrency;
import dev.thaw.bench.coldstart.ColdStartResult.ConcurrencyLevel;
import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.Environment;
import dev.thaw.bench.coldstart.ColdStartResult.ModelResult;
import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import dev.thaw.bench.coldstart.Contender.ContenderException;
import dev.thaw.examples.gpt2.HfCheckpoint;
import dev.thaw.examples.gpt2.SeededWeights;
import dev.thaw.examples.mlp.MlpFunction;
import dev.thaw.examples.safetensors.DType;
import dev.thaw.examples.safetensors.SafetensorsWriter;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.stream.Stream;

/**
 * One harness run: prepares every model once (weights, request, Thaw's image), then runs each contender on each
 * model, main models first, and collects every sample. Nothing in the harness's own JVM touches a GPU: every
 * contender is a child process, so each starts from the state it claims to start from.
 */
final class ColdStartRun {

  static final String TAG_PREFIX = "cold-start-";

  private final ColdStartOptions options;
  private final List<String> command;
  private final PrintStream log;
  private final long started = System.nanoTime();
  private final List<String> notes = new ArrayList<>();
  private final Consumer<ColdStartResult> progress;

  /** {@code progress} gets the result so far after each model, so a run stopped midway leaves its samples. */
  ColdStartRun(ColdStartOptions options, List<String> command, PrintStream log, Consumer<ColdStartResult> progress) {
    this.options = options;
    this.command = List.copyOf(command);
    this.log = log;
    this.progress = progress;
  }

  ColdStartResult execute() throws IOException, InterruptedException {
    String startedAt = Instant.now().toString();
    boolean temporary = options.work() == null;
    Path work = temporary ? Files.createTempDirectory("thaw-cold-start") : Files.createDirectories(options.work());
    HarnessPool pool = new HarnessPool(options.device(), work.resolve("store"), options.childTimeout());
    try (pool) {
      ThawCommand thaw = ThawCommand.locate(options.device(), work.resolve("store"));
      List<Workload> main = options.models().stream().map(Workload::named).toList();
      List<Workload> sweep = options.sweep().stream().filter(s -> !options.models().contains(s))
          .map(Workload::named).toList();
      List<Contender> contenders = options.contenders().stream().map(Contenders::named).toList();
      List<Workload> all = Stream.concat(main.stream(), sweep.stream()).toList();

      // The PyTorch side first: it decides who writes the GPT-2 weights, and measures the PCIe floor.
      Map<String, Path> gpt2Dirs = new LinkedHashMap<>();
      all.stream().filter(w -> w.kind() == Workload.Kind.GPT2)
          .forEach(w -> gpt2Dirs.put(w.name(), work.resolve("weights").resolve(w.name())));
      PythonSide python = null;
      String pythonReason;
      String checkpointReason = null;
      JsonNode prep = ColdStartResult.JSON.createObjectNode();
      if (options.device().equals("sim")) {
        pythonReason = "the run is on the simulated device (--device sim): PyTorch and the driver checkpoint need a GPU";
      } else {
        PythonSide side = PythonSide.extract(options.python(), work);
        say("preparing the PyTorch side (%s): GPT-2 weights by save_pretrained, pinned H2D bandwidth", options.python());
        prep = side.prepare(gpt2Dirs, options.seed(), options.childTimeout().multipliedBy(2));
        if (prep.path("usable").asBoolean()) {
          python = side;
          pythonReason = null;
          checkpointReason = prep.path("checkpointApiMissing").isTextual()
              ? prep.path("checkpointApiMissing").asText() : null;
        } else {
          pythonReason = prep.path("reason").asText("coldstart.py prepare gave no reason");
        }
      }
      if (python == null) {
        say("PyTorch contenders skipped: %s", pythonReason);
        for (Map.Entry<String, Path> e : gpt2Dirs.entrySet()) {
          say("writing %s weights (seeded, by Thaw's HfCheckpoint.save: PyTorch is not here to write them)", e.getKey());
          try (SeededWeights seeded = new SeededWeights(Workload.named(e.getKey()).gpt2(), options.seed())) {
            HfCheckpoint.save(seeded, e.getValue());
          }
        }
      }
      Bench bench = new Bench(thaw, python, pythonReason, checkpointReason, work, options.childTimeout(), log,
          pool, options.out());

      // One model at a time, main models first: a sweep model not begun by the deadline costs nothing.
      Boolean simulated = options.device().equals("sim") ? Boolean.TRUE : null;
      List<ModelResult> models = new ArrayList<>();
      Map<String, PreparedModel> preparedByName = new LinkedHashMap<>();
      Concurrency concurrency = null;
      // Main models, then the concurrent cold starts (on a main model's image, already built), then the sweep:
      // the most expensive part last, where the deadline can cut it.
      for (Workload w : all) {
        boolean isSweep = !main.contains(w);
        if (isSweep && concurrency == null && !options.concurrency().isEmpty()) {
          concurrency = concurrency(preparedByName.get(options.concurrencyModel()), pool);
        }
        if (isSweep && pastDeadline()) {
          notes.add(w.name() + ": not run, the run was past its deadline (" + options.deadline().toSeconds() + " s)");
          continue;
        }
        PreparedModel p = prepare(bench, w, isSweep, gpt2Dirs.get(w.name()));
        preparedByName.put(w.name(), p);
        if (p.buildSimulated() != null) {
          simulated = simulated == null ? p.buildSimulated() : simulated || p.buildSimulated();
        }
        List<ContenderResult> results = new ArrayList<>();
        for (Contender c : contenders) {
          if (!p.sweep() || options.sweepContenders().contains(c.id())) {
            results.add(runOne(bench, c, p));
          }
        }
        models.add(new ModelResult(w.name(), p.sweep(), p.imageBytes(), p.weightsBytes(), requestForReport(w),
            p.buildAnswer(), results, checkAnswers(p, results)));
        progress.accept(result(startedAt, simulated, thaw, prep, pythonReason, models, concurrency));
      }
      if (concurrency == null && !options.concurrency().isEmpty()) {
        concurrency = concurrency(preparedByName.get(options.concurrencyModel()), pool);
      }
      return result(startedAt, simulated, thaw, prep, pythonReason, models, concurrency);
    } finally {
      if (temporary && !options.keepWork()) {
        deleteTree(work);
      } else {
        say("work folder kept: %s", work);
      }
    }
  }

  private Concurrency concurrency(PreparedModel p, HarnessPool pool) throws InterruptedException {
    // The shared pool's idle worker would only take GPU memory from the levels; it starts again if asked.
    pool.close();
    boolean perGpu = options.concurrencyPerGpu();
    String id = perGpu ? ThawPoolColdContender.CACHE_ID : ThawPoolColdContender.ID;
    Long bytes = p.imageBytes();
    if (pastDeadline()) {
      String reason = "the run was past its deadline (" + options.deadline().toSeconds() + " s)";
      notes.add("concurrent cold starts: skipped, " + reason);
      return new Concurrency(p.workload().name(), id, bytes, List.of(), reason, perGpu);
    }
    say("%s: concurrent cold starts through the context pool%s: %s", p.workload().name(),
        perGpu ? ", one per GPU" : "", options.concurrency());
    try {
      Concurrency c = perGpu ? ConcurrencySweep.perGpu(p, options.concurrency(), options.device(), pool.store(),
          options.childTimeout()) : ConcurrencySweep.run(p, options.concurrency(), options.device(), pool.store(),
          options.childTimeout());
      for (ConcurrencyLevel level : c.levels()) {
        say("%s: %d at once: median %.1f ms, last %.1f ms", p.workload().name(), level.concurrent(), level.median(),
            level.last());
      }
      return c;
    } catch (ContenderException e) {
      say("concurrent cold starts FAILED: %s", e.getMessage());
      notes.add("concurrent cold starts: FAILED: " + e.getMessage());
      return new Concurrency(p.workload().name(), id, bytes, List.of(), "FAILED: " + e.getMessage(), perGpu);
    }
  }

  private ColdStartResult result(String startedAt, Boolean simulated, ThawCommand thaw, JsonNode prep,
      String pythonReason, List<ModelResult> models, Concurrency concurrency) {
    boolean sim = simulated != null && simulated;
    Environment env = new Environment(thaw.describe(), text(prep, "python"), text(prep, "torch"),
        text(prep, "transformers"), text(prep, "device"),
        prep.path("h2dGBps").isNumber() ? prep.get("h2dGBps").asDouble() : null,
        prep.path("h2dGBps").isNumber() ? "torch: 1 GiB from pinned memory, best of 5, CUDA events" : null,
        pythonReason);
    String device = sim ? "Thaw's simulated device (no GPU): SIMULATED, no time here is a GPU time"
        : Optional.ofNullable(text(prep, "device")).orElse("a GPU (its name unknown: PyTorch did not run)");
    return new ColdStartResult(ColdStartResult.FORMAT, sim, device, startedAt, command, options.runs(),
        options.sweepRuns(), env, models, concurrency, notes);
  }

  private PreparedModel prepare(Bench bench, Workload w, boolean sweep, Path gpt2Dir)
      throws IOException, InterruptedException {
    Path requests = Files.createDirectories(bench.work().resolve("requests"));
    Path request = requests.resolve(w.name() + ".json");
    ColdStartResult.JSON.writeValue(request.toFile(), w.request());
    Path weights;
    if (w.kind() == Workload.Kind.GPT2) {
      weights = gpt2Dir;
    } else {
      weights = Files.createDirectories(bench.work().resolve("weights")).resolve(w.name() + ".safetensors");
      writeMlp(weights);
    }
    long weightsBytes = Files.isDirectory(weights)
        ? Files.size(weights.resolve(HfCheckpoint.WEIGHTS_FILE)) : Files.size(weights);

    String tag = TAG_PREFIX + w.name();
    say("%s: building Thaw's image %s", w.name(), tag);
    Child build = Child.run(bench.thaw().command("build", "--function", w.functionClass(), "--config",
        w.thawConfig(weights).toString(), "--tag", tag, "--sample-request", request.toString(), "--json"),
        bench.thaw().environment(), options.childTimeout());
    if (build.exit() != 0) {
      notes.add(w.name() + ": thaw build failed: " + build.failure());
      return new PreparedModel(w, sweep, request, weights, weightsBytes, null, null, null, null, build.failure());
    }
    JsonNode out = ColdStartResult.JSON.readTree(build.stdout());
    JsonNode answer = out.path("sampleResponses").path(0);
    return new PreparedModel(w, sweep, request, weights, weightsBytes, tag, out.path("totalBytes").asLong(),
        answer.isMissingNode() ? null : w.answerOf(answer), out.path("simulated").asBoolean(), null);
  }

  /** The request as the JSON keeps it: whole when short (GPT-2's prompt), else what it is (the MLP's batch). */
  private static JsonNode requestForReport(Workload w) {
    ObjectNode r = w.request();
    if (r.toString().length() <= 1000) {
      return r;
    }
    return ColdStartResult.JSON.createObjectNode().put("summary", Workload.MLP_ROWS + " rows of "
        + Workload.MLP_LAYERS.get(0) + " seeded values in [-1, 1) (Workload.request)");
  }

  /** The MLP's weights as Thaw's config makes them ({@link MlpFunction.LayerParameters}), fp32 safetensors. */
  static void writeMlp(Path file) throws IOException {
    SafetensorsWriter writer = new SafetensorsWriter().metadata("format", "pt");
    List<Integer> layers = Workload.MLP_LAYERS;
    for (int i = 0; i + 1 < layers.size(); i++) {
      int k = layers.get(i);
      int n = layers.get(i + 1);
      MlpFunction.LayerParameters p = new MlpFunction.LayerParameters(Workload.MLP_SEED, i, k, n, i + 2 == layers.size());
      ByteBuffer w = ByteBuffer.allocate(4 * k * n).order(ByteOrder.LITTLE_ENDIAN);
      for (int j = 0; j < k * n; j++) {
        w.putFloat(p.nextWeight());
      }
      ByteBuffer b = ByteBuffer.allocate(4 * n).order(ByteOrder.LITTLE_ENDIAN);
      for (int j = 0; j < n; j++) {
        b.putFloat(p.nextBias());
      }
      writer.add("w" + i, DType.F32, new long[] {k, n}, w.flip());
      writer.add("b" + i, DType.F32, new long[] {n}, b.flip());
    }
    writer.write(file);
  }

  private ContenderResult runOne(Bench bench, Contender c, PreparedModel p) throws InterruptedException {
    String model = p.workload().name();
    Optional<String> unavailable = c.unavailable(bench);
    if (unavailable.isPresent()) {
      return ContenderResult.skipped(c, unavailable.get());
    }
    if (p.sweep() && pastDeadline()) {
      String reason = "the run was past its deadline (" + options.deadline().toSeconds() + " s)";
      notes.add(model + " / " + c.id() + ": skipped, " + reason);
      return ContenderResult.skipped(c, reason);
    }
    int runs = p.sweep() ? options.sweepRuns() : options.runs();
    say("%s: %s, %d run%s", model, c.label(), runs, runs == 1 ? "" : "s");
    try {
      List<Sample> samples = c.run(bench, p, runs);
      ContenderResult r = new ContenderResult(c.id(), c.label(), Status.RAN, null, samples);
      say("%s: %s: median %.1f ms (min %.1f, max %.1f)", model, c.id(), r.median(),
          Arrays.stream(r.ttfr()).min().orElseThrow(), Arrays.stream(r.ttfr()).max().orElseThrow());
      return r;
    } catch (ContenderException e) {
      say("%s: %s FAILED: %s", model, c.id(), e.getMessage());
      notes.add(model + " / " + c.id() + ": FAILED: " + e.getMessage());
      return new ContenderResult(c.id(), c.label(), Status.FAILED, e.getMessage(), List.of());
    }
  }

  /**
   * Every answer of every contender that ran (and the build's) against the others. Where they differ, a
   * contender's reported top-1/top-2 gap below {@link AnswerCheck#NEAR_TIE} makes it a near-tie, not a failure:
   * fp16 weights with fp32 logits on one side and fp16 on the other may break a tie either way.
   */
  static AnswerCheck checkAnswers(PreparedModel p, List<ContenderResult> results) {
    Map<String, LinkedHashSet<String>> byAnswer = new LinkedHashMap<>();
    double smallestGap = Double.POSITIVE_INFINITY;
    if (p.buildAnswer() != null) {
      byAnswer.computeIfAbsent(p.buildAnswer().toString(), k -> new LinkedHashSet<>()).add("thaw build");
    }
    for (ContenderResult r : results) {
      for (Sample s : r.samples()) {
        byAnswer.computeIfAbsent(s.answer().toString(), k -> new LinkedHashSet<>()).add(r.id());
        if (s.gap() != null) {
          smallestGap = Math.min(smallestGap, s.gap());
        }
      }
    }
    StringBuilder detail = new StringBuilder();
    byAnswer.forEach((answer, who) -> detail.append(detail.length() == 0 ? "" : "; ").append(answer).append(" from ")
        .append(String.join(", ", who)));
    int givers = byAnswer.values().stream().mapToInt(LinkedHashSet::size).sum();
    if (byAnswer.size() <= 1) {
      return new AnswerCheck(givers < 2 ? "n/a" : "agree", detail.toString());
    }
    if (smallestGap < AnswerCheck.NEAR_TIE) {
      return new AnswerCheck("near-tie", detail + String.format(Locale.ROOT, " (smallest top-2 gap %.4g)", smallestGap));
    }
    return new AnswerCheck("DIFFER", detail.toString());
  }

  private boolean pastDeadline() {
    return options.deadline() != null && Duration.ofNanos(System.nanoTime() - started).compareTo(options.deadline()) > 0;
  }

  private void say(String format, Object... args) {
    log.printf(Locale.ROOT, "[%6.1f s] %s%n", (System.nanoTime() - started) / 1e9, String.format(Locale.ROOT, format, args));
    log.flush();
  }

  private static String text(JsonNode node, String field) {
    return node.path(field).isTextual() ? node.get(field).asText() : null;
  }

  static void deleteTree(Path root) throws IOException {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(root)) {
      for (Path p : paths.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}
