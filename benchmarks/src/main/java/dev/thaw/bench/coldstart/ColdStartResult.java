package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Everything one harness run measured, as written to {@code cold-start.json}: raw samples, not summaries, so a
 * report or a plot can be made again from the file alone ({@code thaw-bench cold-start plot}).
 *
 * @param harness the format's name and version
 * @param simulated whether Thaw ran on the simulated device: then no time in the file is a GPU time
 * @param device the device line (the GPU's name, or the simulated device)
 * @param startedAt when the run began (ISO-8601, UTC)
 * @param command the command line
 * @param runs cold starts per contender and main model
 * @param sweepRuns cold starts per contender and sweep model
 * @param environment what the run measured about its host
 * @param models one entry per model, main models first
 * @param concurrency cold starts at once on one GPU, or null when not asked for
 * @param notes what the reader must know: skipped contenders, deadlines, plots not drawn
 */
@JsonInclude(JsonInclude.Include.NON_NULL)
public record ColdStartResult(String harness, boolean simulated, String device, String startedAt, List<String> command,
    int runs, int sweepRuns, Environment environment, List<ModelResult> models, Concurrency concurrency,
    List<String> notes) {

  public static final String FORMAT = "thaw-cold-start/1";

  static final ObjectMapper JSON = new ObjectMapper()
      .enable(SerializationFeature.INDENT_OUTPUT)
      .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES);

  public ColdStartResult {
    command = List.copyOf(command);
    models = List.copyOf(models);
    notes = List.copyOf(notes);
  }

  /**
   * What the run found about its host.
   *
   * @param thaw how {@code thaw} was started: the distribution's {@code bin/thaw}, or a development JVM (tests)
   * @param python {@code python3}'s version, or null when PyTorch was not tried
   * @param torch torch's version
   * @param transformers transformers' version
   * @param gpu the GPU as torch names it
   * @param h2dGBps pinned host-to-device copy bandwidth measured in the run (10^9 bytes a second): the PCIe floor
   * @param h2dSource how it was measured
   * @param pythonUnavailable why the PyTorch contenders could not run, or null
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record Environment(String thaw, String python, String torch, String transformers, String gpu, Double h2dGBps,
      String h2dSource, String pythonUnavailable) {}

  /**
   * One model's results.
   *
   * @param model its name ({@link Workload#names()})
   * @param sweep whether it ran only in the image-size sweep
   * @param imageBytes device memory in Thaw's image of it
   * @param weightsBytes the size of the weights file every contender loads
   * @param request the request every contender was asked
   * @param buildAnswer the answer {@code thaw build} recorded for the request
   * @param contenders one entry per contender, in the order they ran
   * @param answers whether their answers agree
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record ModelResult(String model, boolean sweep, Long imageBytes, Long weightsBytes, JsonNode request,
      JsonNode buildAnswer, List<ContenderResult> contenders, AnswerCheck answers) {

    public ModelResult {
      contenders = List.copyOf(contenders);
    }

    public Optional<ContenderResult> contender(String id) {
      return contenders.stream().filter(c -> c.id().equals(id)).findFirst();
    }
  }

  /** Whether a contender ran. */
  public enum Status { RAN, SKIPPED, FAILED }

  /**
   * One contender on one model.
   *
   * @param id its stable name ({@link Contender#id()})
   * @param label how reports name it
   * @param status whether it ran
   * @param reason why it was skipped or failed, or null
   * @param samples one per cold start, in order
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record ContenderResult(String id, String label, Status status, String reason, List<Sample> samples) {

    public ContenderResult {
      samples = List.copyOf(samples);
    }

    static ContenderResult skipped(Contender c, String reason) {
      return new ContenderResult(c.id(), c.label(), Status.SKIPPED, reason, List.of());
    }

    public boolean ran() {
      return status == Status.RAN && !samples.isEmpty();
    }

    /** Time to first response of each sample, in milliseconds. */
    public double[] ttfr() {
      return samples.stream().mapToDouble(Sample::ttfrMillis).toArray();
    }

    public double median() {
      return median(ttfr());
    }

    /** The median of each phase over the samples, in the samples' phase order. */
    public Map<String, Double> medianPhases() {
      Map<String, Double> out = new LinkedHashMap<>();
      for (Sample s : samples) {
        s.phases().keySet().forEach(k -> out.putIfAbsent(k, 0.0));
      }
      out.replaceAll((phase, zero) -> median(samples.stream()
          .mapToDouble(s -> s.phases().getOrDefault(phase, 0.0)).toArray()));
      return out;
    }

    static double median(double[] values) {
      if (values.length == 0) {
        return Double.NaN;
      }
      double[] v = values.clone();
      Arrays.sort(v);
      int n = v.length;
      return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
  }

  /**
   * One cold start.
   *
   * @param ttfrMillis time to first response: from the start of the cold start (a process spawned, a restore
   *     called) to the response in the harness's hands
   * @param phases where that time went, in order; together they add up to {@code ttfrMillis}
   * @param answer the answer, in {@link Workload#answerOf}'s form
   * @param gap the smallest top-1 minus top-2 score behind the answer, when the contender reports it
   * @param extra other numbers the contender reports (a checkpoint's time, a process's exit)
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record Sample(double ttfrMillis, Map<String, Double> phases, JsonNode answer, Double gap,
      Map<String, Double> extra) {

    public Sample {
      phases = phases == null ? Map.of() : Collections.unmodifiableMap(new LinkedHashMap<>(phases));
      extra = extra == null ? null : Collections.unmodifiableMap(new LinkedHashMap<>(extra));
    }
  }

  /**
   * Whether the contenders that ran gave the same answer.
   *
   * @param verdict {@code agree}, {@code near-tie} (they differ where the top two scores are closer than
   *     {@link AnswerCheck#NEAR_TIE}), {@code DIFFER}, or {@code n/a} (fewer than two answers)
   * @param detail each distinct answer and who gave it
   */
  public record AnswerCheck(String verdict, String detail) {
    /** fp16 weights, fp32 logits on one side and fp16 on the other: closer than this is a tie. */
    public static final double NEAR_TIE = 0.05;

    public boolean failed() {
      return verdict.equals("DIFFER");
    }
  }

  /**
   * Concurrent cold starts of one model.
   *
   * @param model the model
   * @param contender how each cold start was made ({@link ThawPoolColdContender#ID})
   * @param imageBytes its image's size, for the PCIe floor of N at once
   * @param levels one per N, in the order run
   * @param skipped why it did not run, or null
   * @param perGpu true: the N cold starts went one to each of N GPUs, each from the host cache through its own link;
   *     null or false: all N on one GPU
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record Concurrency(String model, String contender, Long imageBytes, List<ConcurrencyLevel> levels,
      String skipped, Boolean perGpu) {
    public Concurrency {
      levels = levels == null ? List.of() : List.copyOf(levels);
    }

    public Concurrency(String model, String contender, Long imageBytes, List<ConcurrencyLevel> levels,
        String skipped) {
      this(model, contender, imageBytes, levels, skipped, null);
    }

    /** True when each of the N went to a GPU of its own. */
    public boolean onePerGpu() {
      return perGpu != null && perGpu;
    }
  }

  /**
   * N cold starts at once.
   *
   * @param concurrent N
   * @param ttfrMillis each one's time from the common start to its answer
   */
  public record ConcurrencyLevel(int concurrent, List<Double> ttfrMillis) {
    public ConcurrencyLevel {
      ttfrMillis = List.copyOf(ttfrMillis);
    }

    public double median() {
      return ContenderResult.median(ttfrMillis.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** When the last of them answered. */
    public double last() {
      return ttfrMillis.stream().mapToDouble(Double::doubleValue).max().orElse(Double.NaN);
    }
  }

  public void write(Path file) throws IOException {
    JSON.writeValue(file.toFile(), this);
  }

  public static ColdStartResult read(Path file) throws IOException {
    return JSON.readValue(file.toFile(), ColdStartResult.class);
  }
}
