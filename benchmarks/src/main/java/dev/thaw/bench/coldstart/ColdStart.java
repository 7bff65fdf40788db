package dev.thaw.bench.coldstart;

import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;

/**
 * {@code thaw-bench cold-start}: Thaw against PyTorch from scratch and NVIDIA's driver checkpoint, side by side in
 * one run. Writes {@code cold-start.json} (every sample), {@code cold-start.md} (the tables) and
 * {@code plots/} into {@code --out}. {@code thaw-bench cold-start plot} draws the table and plots again from a
 * JSON. Exit status: 0 when every contender that could run ran and every answer agreed, 1 otherwise, 2 on a
 * usage error.
 */
@Command(name = "cold-start", mixinStandardHelpOptions = true, sortOptions = false,
    subcommands = ColdStart.Plot.class,
    description = {
        "Cold-start every contender on each model, N times each, from fresh state:",
        "Thaw in a fresh process (thaw run); a pooled Thaw worker restoring from the",
        "store or from the host cache (and warm); PyTorch from scratch (a new",
        "python3); a PyTorch server suspended and resumed by NVIDIA's driver checkpoint.",
        "Writes cold-start.json (raw samples), cold-start.md and plots/ into --out.",
        "Contenders that cannot run here (no GPU, no PyTorch) are skipped with the",
        "reason; on the simulated device every output says SIMULATED.",
        ""})
public final class ColdStart implements Callable<Integer> {

  static final String JSON_FILE = "cold-start.json";
  static final String REPORT_FILE = "cold-start.md";

  @Spec
  CommandLine.Model.CommandSpec spec;

  @Option(names = "--models", split = ",", paramLabel = "MODEL",
      description = "Main models: every contender runs them (default: ${DEFAULT-VALUE}); known: mlp, gpt2-tiny, "
          + "gpt2, gpt2-medium, gpt2-large, gpt2-xl.")
  List<String> models = ColdStartOptions.DEFAULT_MODELS;

  @Option(names = "--sweep", split = ",", paramLabel = "MODEL",
      description = "More models for the image-size plot, run only by the contenders that sweep.")
  List<String> sweep = List.of();

  @Option(names = "--contenders", split = ",", paramLabel = "ID",
      description = "Which contenders (default: all): thaw-process, thaw-pool-cold, thaw-pool-cold-cache, "
          + "thaw-pool-warm, pytorch-scratch, driver-checkpoint.")
  List<String> contenders;

  @Option(names = "--sweep-contenders", split = ",", paramLabel = "ID",
      description = "Which contenders run the sweep models (default: every chosen one that sweeps: thaw-process, "
          + "thaw-pool-cold, thaw-pool-cold-cache, driver-checkpoint).")
  List<String> sweepContenders;

  @Option(names = "--runs", paramLabel = "N", description = "Cold starts per contender and model (default: ${DEFAULT-VALUE}).")
  int runs = ColdStartOptions.DEFAULT_RUNS;

  @Option(names = "--sweep-runs", paramLabel = "N", description = "Cold starts per sweep model (default: ${DEFAULT-VALUE}).")
  int sweepRuns = ColdStartOptions.DEFAULT_SWEEP_RUNS;

  @Option(names = "--out", paramLabel = "DIR", description = "Where the JSON, the table and the plots go.")
  Path out;

  @Option(names = "--work", paramLabel = "DIR",
      description = "Where weights, requests and the image store go (default: a temporary folder, deleted after).")
  Path work;

  @Option(names = "--keep-work", description = "Keep the temporary work folder.")
  boolean keepWork;

  @Option(names = "--device", paramLabel = "auto|cuda|sim",
      description = "THAW_DEVICE for Thaw (default: ${DEFAULT-VALUE}); sim also skips the PyTorch contenders.")
  String device = ColdStartOptions.DEFAULT_DEVICE;

  @Option(names = "--python", paramLabel = "EXE", description = "The Python with torch (default: ${DEFAULT-VALUE}).")
  String python = ColdStartOptions.DEFAULT_PYTHON;

  @Option(names = "--deadline", paramLabel = "SECONDS",
      description = "Skip the sweep models and concurrency levels not begun by then (the report says which).")
  Integer deadlineSeconds;

  @Option(names = "--child-timeout", paramLabel = "SECONDS",
      description = "Kill a child process that runs longer (default: 180).")
  int childTimeoutSeconds = (int) ColdStartOptions.DEFAULT_CHILD_TIMEOUT.toSeconds();

  @Option(names = "--trace", paramLabel = "FILE", description = "A Chrome-trace JSON of a restore, to draw as a timeline.")
  Path trace;

  @Option(names = "--concurrency", split = ",", paramLabel = "N",
      description = "Also N cold starts at once through the context pool, per level (e.g. 1,2,4,8), after the "
          + "main models and before the sweep; subject to --deadline.")
  List<Integer> concurrency = List.of();

  @Option(names = "--concurrency-per-gpu",
      description = "Each concurrency level N puts one cold start on each of N GPUs at once, from the host cache, "
          + "each through its own link (levels up to the GPUs there are), instead of all N on one GPU.")
  boolean concurrencyPerGpu;

  @Option(names = "--concurrency-model", paramLabel = "MODEL",
      description = "The main model the concurrency levels run (default: the last of --models).")
  String concurrencyModel;

  private final List<String> args;
  private final PrintStream log;

  ColdStart(List<String> args, PrintStream log) {
    this.args = List.copyOf(args);
    this.log = log;
  }

  public static void main(String[] args) {
    System.exit(execute(args, System.out, System.err));
  }

  static int execute(String[] args, PrintStream out, PrintStream err) {
    CommandLine cmd = new CommandLine(new ColdStart(List.of(args), out));
    cmd.setOut(new PrintWriter(out, true));
    cmd.setErr(new PrintWriter(err, true));
    return cmd.execute(args);
  }

  @Override
  public Integer call() throws IOException, InterruptedException {
    if (out == null) {
      throw new ParameterException(spec.commandLine(), "--out DIR is required");
    }
    ColdStartOptions options;
    try {
      options = new ColdStartOptions().setModels(models).setSweep(sweep).setRuns(runs).setSweepRuns(sweepRuns)
          .setOut(out).setWork(work).setKeepWork(keepWork).setDevice(device).setPython(python)
          .setChildTimeout(Duration.ofSeconds(childTimeoutSeconds)).setTrace(trace).setConcurrency(concurrency)
          .setConcurrencyModel(concurrencyModel).setConcurrencyPerGpu(concurrencyPerGpu);
      if (contenders != null) {
        options.setContenders(contenders);
      }
      if (sweepContenders != null) {
        options.setSweepContenders(sweepContenders);
      }
      if (deadlineSeconds != null) {
        options.setDeadline(Duration.ofSeconds(deadlineSeconds));
      }
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    Files.createDirectories(out);
    List<String> command = new ArrayList<>(List.of("thaw-bench", "cold-start"));
    command.addAll(args);
    Path json = out.resolve(JSON_FILE);
    ColdStartResult result = new ColdStartRun(options, command, log, partial -> {
      try {
        partial.write(json);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }).execute();
    result.write(out.resolve(JSON_FILE));
    log.println("wrote " + out.resolve(JSON_FILE));
    writeReport(result, out, trace(result, trace, out), log);
    boolean failed = result.models().stream().anyMatch(m -> m.answers().failed()
        || m.contenders().stream().anyMatch(c -> c.status() == ColdStartResult.Status.FAILED));
    if (result.simulated()) {
      log.println("SIMULATED: Thaw ran on the simulated device; no time in this run is a GPU time");
    }
    return failed ? 1 : 0;
  }

  /**
   * The trace to draw: the one given, else the last cold start of the Thaw server's trace of the last main model
   * that has one (in {@code folder}'s {@code traces/}), else none.
   */
  static ChromeTrace trace(ColdStartResult result, Path given, Path folder) throws IOException {
    if (given != null) {
      return ChromeTrace.read(given);
    }
    List<ColdStartResult.ModelResult> main = result.models().stream().filter(m -> !m.sweep()).toList();
    for (int i = main.size() - 1; i >= 0; i--) {
      Path file = folder.resolve(ChromeTrace.FOLDER).resolve(main.get(i).model() + ".trace.json");
      if (Files.isRegularFile(file)) {
        return ChromeTrace.read(file).lastProcess();
      }
    }
    return null;
  }

  /** The table and the plots of a result, into {@code out}. */
  static void writeReport(ColdStartResult result, Path out, ChromeTrace trace, PrintStream log) throws IOException {
    List<String> plots = plots(result, out, trace);
    Files.writeString(out.resolve(REPORT_FILE), MarkdownReport.render(result, plots));
    log.println("wrote " + out.resolve(REPORT_FILE));
    plots.stream().filter(l -> l.startsWith("- not drawn") || l.startsWith("- no plots")).forEach(log::println);
  }

  /**
   * The plots, or one line saying why there are none. Checked here, in a class that names no AWT type, because
   * {@link ColdStartPlots} cannot even be loaded by a Java without {@code java.desktop}.
   */
  static List<String> plots(ColdStartResult result, Path out, ChromeTrace trace) throws IOException {
    String elsewhere = "; draw them from the JSON with a full JDK 17: `java -cp 'thaw/lib/*:thaw/lib/bench/*' "
        + ColdStart.class.getName() + " plot --from " + JSON_FILE + " --out DIR`";
    if (ModuleLayer.boot().findModule("java.desktop").isEmpty()) {
      // The tarball's runtime leaves java.desktop out: it would add 8.5 MB to a tarball that must stay under 60 MiB.
      return List.of("- no plots: this Java runtime has no java.desktop module" + elsewhere);
    }
    try {
      return ColdStartPlots.render(result, out, trace);
    } catch (LinkageError e) {
      return List.of("- no plots: " + e + elsewhere);
    }
  }

  /** {@code thaw-bench cold-start plot}: the table and the plots again, from a run's JSON. */
  @Command(name = "plot", mixinStandardHelpOptions = true,
      description = "Draw the table and the plots of a run again from its cold-start.json.")
  static final class Plot implements Callable<Integer> {

    @Option(names = "--from", required = true, paramLabel = "FILE", description = "A run's cold-start.json.")
    Path from;

    @Option(names = "--out", required = true, paramLabel = "DIR", description = "Where cold-start.md and plots/ go.")
    Path out;

    @Option(names = "--trace", paramLabel = "FILE", description = "A Chrome-trace JSON of a restore, to draw as a timeline.")
    Path trace;

    @Override
    public Integer call() throws IOException {
      ColdStartResult result = ColdStartResult.read(from);
      Files.createDirectories(out);
      writeReport(result, out, trace(result, trace, from.toAbsolutePath().getParent()), System.out);
      return 0;
    }
  }
}
