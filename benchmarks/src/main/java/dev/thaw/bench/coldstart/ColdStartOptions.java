package dev.thaw.bench.coldstart;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/** What a cold-start run measures and where it writes: every setting with its default. */
public final class ColdStartOptions {

  public static final List<String> DEFAULT_MODELS = List.of("mlp", "gpt2-large");
  public static final int DEFAULT_RUNS = 5;
  public static final int DEFAULT_SWEEP_RUNS = 3;
  public static final String DEFAULT_DEVICE = "auto";
  public static final String DEFAULT_PYTHON = "python3";
  /** The torch seed of the GPT-2 weights (as {@code scripts/gpt2/hf_reference.py} uses). */
  public static final long DEFAULT_SEED = 1234;
  public static final Duration DEFAULT_CHILD_TIMEOUT = Duration.ofMinutes(3);

  private List<String> models = DEFAULT_MODELS;
  private List<String> sweep = List.of();
  private List<String> contenders = Contenders.ids();
  private List<String> sweepContenders;
  private int runs = DEFAULT_RUNS;
  private int sweepRuns = DEFAULT_SWEEP_RUNS;
  private Path out;
  private Path work;
  private boolean keepWork;
  private String device = DEFAULT_DEVICE;
  private String python = DEFAULT_PYTHON;
  private long seed = DEFAULT_SEED;
  private Duration deadline;
  private Duration childTimeout = DEFAULT_CHILD_TIMEOUT;
  private Path trace;
  private List<Integer> concurrency = List.of();
  private String concurrencyModel;
  private boolean concurrencyPerGpu;

  /** The main models: every contender runs each {@link #runs()} times. */
  public List<String> models() {
    return models;
  }

  public ColdStartOptions setModels(List<String> models) {
    models.forEach(Workload::named);
    this.models = List.copyOf(models);
    return this;
  }

  /** Models run only by the contenders that {@link Contender#sweeps()}, for the image-size plot. */
  public List<String> sweep() {
    return sweep;
  }

  public ColdStartOptions setSweep(List<String> sweep) {
    sweep.forEach(Workload::named);
    this.sweep = List.copyOf(sweep);
    return this;
  }

  /** The contenders to run, by {@link Contender#id()}. */
  public List<String> contenders() {
    return contenders;
  }

  public ColdStartOptions setContenders(List<String> contenders) {
    contenders.forEach(Contenders::named);
    this.contenders = List.copyOf(contenders);
    return this;
  }

  /** Which of the contenders run the sweep models: by default every one that {@link Contender#sweeps()}. */
  public List<String> sweepContenders() {
    return sweepContenders != null ? sweepContenders
        : contenders.stream().filter(id -> Contenders.named(id).sweeps()).toList();
  }

  public ColdStartOptions setSweepContenders(List<String> ids) {
    for (String id : ids) {
      if (!Contenders.named(id).sweeps()) {
        throw new IllegalArgumentException(id + " does not run sweep models");
      }
    }
    this.sweepContenders = List.copyOf(ids);
    return this;
  }

  public int runs() {
    return runs;
  }

  public ColdStartOptions setRuns(int runs) {
    if (runs < 1) {
      throw new IllegalArgumentException("runs must be at least 1, not " + runs);
    }
    this.runs = runs;
    return this;
  }

  public int sweepRuns() {
    return sweepRuns;
  }

  public ColdStartOptions setSweepRuns(int sweepRuns) {
    if (sweepRuns < 1) {
      throw new IllegalArgumentException("sweep runs must be at least 1, not " + sweepRuns);
    }
    this.sweepRuns = sweepRuns;
    return this;
  }

  /** Where the JSON, the table and the plots go. */
  public Path out() {
    return out;
  }

  public ColdStartOptions setOut(Path out) {
    this.out = out;
    return this;
  }

  /** Where weights, requests and the image store go (large: GPT-2-xl is 3.2 GB twice); null for a temporary one. */
  public Path work() {
    return work;
  }

  public ColdStartOptions setWork(Path work) {
    this.work = work;
    return this;
  }

  /** Keep the work folder after the run (a temporary one is deleted otherwise). */
  public boolean keepWork() {
    return keepWork;
  }

  public ColdStartOptions setKeepWork(boolean keepWork) {
    this.keepWork = keepWork;
    return this;
  }

  /** {@code THAW_DEVICE} for Thaw: {@code auto}, {@code cuda} or {@code sim}; {@code sim} skips PyTorch. */
  public String device() {
    return device;
  }

  public ColdStartOptions setDevice(String device) {
    if (!List.of("auto", "cuda", "sim").contains(device)) {
      throw new IllegalArgumentException("device must be auto, cuda or sim, not " + device);
    }
    this.device = device;
    return this;
  }

  public String python() {
    return python;
  }

  public ColdStartOptions setPython(String python) {
    this.python = python;
    return this;
  }

  public long seed() {
    return seed;
  }

  public ColdStartOptions setSeed(long seed) {
    this.seed = seed;
    return this;
  }

  /** Past this much time from the start, sweep models not yet begun are skipped (and the report says so). */
  public Duration deadline() {
    return deadline;
  }

  public ColdStartOptions setDeadline(Duration deadline) {
    this.deadline = deadline;
    return this;
  }

  /** The longest one child process may run before it is killed and its contender failed. */
  public Duration childTimeout() {
    return childTimeout;
  }

  public ColdStartOptions setChildTimeout(Duration childTimeout) {
    this.childTimeout = childTimeout;
    return this;
  }

  /** How many cold starts at once, per level (e.g. 1, 2, 4, 8); empty for none. */
  public List<Integer> concurrency() {
    return concurrency;
  }

  public ColdStartOptions setConcurrency(List<Integer> concurrency) {
    for (int n : concurrency) {
      if (n < 1 || n > 64) {
        throw new IllegalArgumentException("a concurrency level is 1 to 64, not " + n);
      }
    }
    this.concurrency = List.copyOf(concurrency);
    return this;
  }

  /**
   * True: each concurrency level N puts one cold start on each of N GPUs at once (from the host cache, each through its
   * own link), against one alone; levels beyond the GPUs there are fail. False (the default): all N on one GPU.
   */
  public boolean concurrencyPerGpu() {
    return concurrencyPerGpu;
  }

  public ColdStartOptions setConcurrencyPerGpu(boolean on) {
    this.concurrencyPerGpu = on;
    return this;
  }

  /** The main model the concurrency levels run: by default the last of {@link #models()}. */
  public String concurrencyModel() {
    return concurrencyModel != null ? concurrencyModel : models.get(models.size() - 1);
  }

  public ColdStartOptions setConcurrencyModel(String model) {
    if (model != null && !models.contains(model)) {
      throw new IllegalArgumentException("the concurrency model must be one of the main models " + models
          + ", not " + model);
    }
    this.concurrencyModel = model;
    return this;
  }

  /** A Chrome-trace JSON of a restore to draw as a timeline, or null. */
  public Path trace() {
    return trace;
  }

  public ColdStartOptions setTrace(Path trace) {
    this.trace = trace;
    return this;
  }
}
