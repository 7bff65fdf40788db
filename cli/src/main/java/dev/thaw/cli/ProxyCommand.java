package dev.thaw.cli;

import dev.thaw.server.proxy.FunctionProxy;
import dev.thaw.server.proxy.ProxyOptions;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;
import sun.misc.Signal;

/**
 * {@code thaw proxy}: node mode's function pod ({@link FunctionProxy}). Its start time is its reason to be: it loads no
 * HTTP or JSON library, and {@link ThawCli#main} runs it from {@link #parseFast} without picocli (whose model of this
 * one command would be a third of its start: {@code docs/benchmarks/node-proxy.md}), falling back to picocli for help
 * and for anything the fast parser does
 * not take, which then says what is wrong. {@code ProxyCommandTest} keeps the two parsers in step.
 */
@Command(name = "proxy",
    header = "Forward one function's requests to the node server (node mode's function pod).",
    description = {
        "Registers one function with the node server (thaw serve --socket) through its Unix socket, then forwards "
            + "that function's routes to it (native invoke and state, KServe v2, OpenAI completions) with the token "
            + "the server handed over.",
        "Holds no GPU. Readiness (/v2/health/ready) is the function's, asked of the node server.",
        "Runs until SIGTERM or SIGINT, then drains and exits 0; exits 1 when the node server refuses the "
            + "registration.",
        ""},
    footerHeading = "%nEnvironment:%n",
    footer = {
        "  PORT                 the port when --port is not given (Knative sets it)",
        "  THAW_FUNCTION_KEY    the tenant key the function is registered with (16 to",
        "                       1024 characters): the same for every pod of the function,",
        "                       e.g. from a Secret of its namespace. Required.",
        "",
        "Example:",
        "  THAW_FUNCTION_KEY=$(cat key) thaw proxy --socket /run/thaw/thaw.sock \\",
        "      --function gpt2=registry.example.com/thaw/gpt2:large --keep-alive 300s"})
final class ProxyCommand implements Callable<Integer> {

  /** Set when picocli runs it as a subcommand of {@code thaw}; null when {@link ThawCli#main} runs it alone. */
  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Option(names = "--socket", paramLabel = "PATH",
      description = "The node server's Unix socket (default: ${DEFAULT-VALUE}).", defaultValue = DEFAULT_SOCKET)
  Path socket = Path.of(DEFAULT_SOCKET);

  @Option(names = "--function", required = true, paramLabel = "NAME=REFERENCE",
      description = "The function: its name on the node server and its image's registry reference.")
  String function;

  @Option(names = "--host", paramLabel = "ADDRESS",
      description = "Address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface).")
  String host;

  @Option(names = "--port", paramLabel = "PORT", description = "Port to listen on (default: $PORT, else 8080; 0: any).")
  Integer port;

  @Option(names = "--keep-alive", paramLabel = "DURATION",
      description = "How long the node server keeps an idle instance of the function (e.g. 300s).")
  String keepAlive;

  @Option(names = "--max-instances", paramLabel = "N", description = "Instances of the function at most.")
  Integer maxInstances;

  @Option(names = "--min-instances", paramLabel = "N", description = "Instances kept while idle.")
  Integer minInstances;

  @Option(names = "--queue-capacity", paramLabel = "N", description = "Requests that may wait for an instance.")
  Integer queueCapacity;

  @Option(names = "--drain-timeout", paramLabel = "DURATION", defaultValue = DEFAULT_DRAIN,
      description = "On SIGTERM, how long requests in flight may take to finish (default: ${DEFAULT-VALUE}).")
  String drainTimeout = DEFAULT_DRAIN;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  private static final String DEFAULT_SOCKET = "/run/thaw/thaw.sock";
  private static final String DEFAULT_DRAIN = "30s";

  private final Map<String, String> environment;
  private PrintWriter out;
  private PrintWriter err;

  /** As a subcommand of {@code thaw}: the environment is the parent's. */
  ProxyCommand() {
    this(Map.of());
  }

  ProxyCommand(Map<String, String> environment) {
    this.environment = Map.copyOf(environment);
  }

  private String env(String name) {
    return cli != null ? cli.env(name) : environment.get(name);
  }

  /**
   * The command with {@code args} set, parsed without picocli, or null when they hold anything but the options below
   * as {@code --name value} or {@code --name=value} (help, a misspelling, a number that is not one).
   */
  static ProxyCommand parseFast(Map<String, String> environment, String[] args) {
    ProxyCommand c = new ProxyCommand(environment);
    try {
      for (int i = 0; i < args.length; i++) {
        String a = args[i];
        int eq = a.indexOf('=');
        String name = eq > 0 && a.startsWith("--") ? a.substring(0, eq) : a;
        String value = eq > 0 && a.startsWith("--") ? a.substring(eq + 1) : i + 1 < args.length ? args[++i] : null;
        if (value == null || !c.setFast(name, value)) {
          return null;
        }
      }
    } catch (NumberFormatException e) {
      return null;
    }
    return c.function == null ? null : c;
  }

  /** The options {@link #parseFast} takes; false for any other name. */
  static final List<String> FAST_OPTIONS = List.of("--socket", "--function", "--host", "--port", "--keep-alive",
      "--max-instances", "--min-instances", "--queue-capacity", "--drain-timeout");

  private boolean setFast(String name, String value) {
    switch (name) {
      case "--socket" -> socket = Path.of(value);
      case "--function" -> function = value;
      case "--host" -> host = value;
      case "--port" -> port = Integer.valueOf(value);
      case "--keep-alive" -> keepAlive = value;
      case "--max-instances" -> maxInstances = Integer.valueOf(value);
      case "--min-instances" -> minInstances = Integer.valueOf(value);
      case "--queue-capacity" -> queueCapacity = Integer.valueOf(value);
      case "--drain-timeout" -> drainTimeout = value;
      default -> {
        return false;
      }
    }
    return true;
  }

  /**
   * Runs the command parsed by {@link #parseFast}: its exit status, or null when its values are wrong (picocli parses
   * them again and says so).
   */
  Integer runFast(PrintWriter out, PrintWriter err) throws Exception {
    this.out = out;
    this.err = err;
    ProxyOptions options;
    try {
      options = options();
    } catch (IllegalArgumentException wrong) {
      return null;
    }
    return run(options);
  }

  @Override
  public Integer call() throws Exception {
    out = spec.commandLine().getOut();
    err = spec.commandLine().getErr();
    try {
      return run(options());
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
  }

  private int run(ProxyOptions options) throws Exception {
    // Its registrations (and why one failed) are the pod's log: INFO, where the rest of the CLI stays at WARN.
    System.setProperty("org.slf4j.simpleLogger.log." + FunctionProxy.LOG_NAME, "info");
    FunctionProxy proxy = FunctionProxy.start(options);
    out.printf("proxy    %s = %s, through %s%n", options.function(), options.image(), options.socket());
    out.printf("listening on http://%s:%d%n", options.host(), proxy.port());
    out.flush();

    AtomicInteger exit = new AtomicInteger(-1);
    CountDownLatch stopped = new CountDownLatch(1);
    Duration drain = options.drainTimeout();
    Runnable stop = () -> {
      boolean drained = proxy.drain(drain);
      proxy.close();
      out.println(drained ? "drained; bye" : "drain timed out after " + drain.toMillis() + " ms; bye");
      out.flush();
      exit.compareAndSet(-1, drained ? ThawCli.EXIT_OK : ThawCli.EXIT_FAILED);
      stopped.countDown();
    };
    for (String signal : new String[] {"TERM", "INT"}) {
      Signal.handle(new Signal(signal), sig -> new Thread(stop, "thaw-proxy-drain").start());
    }
    proxy.refused().thenAccept(why -> {
      err.println("thaw: " + why);
      err.flush();
      proxy.close();
      exit.compareAndSet(-1, ThawCli.EXIT_FAILED);
      stopped.countDown();
    });
    stopped.await();
    // A signal's exit status would be 143; a drained proxy exits 0, as Knative's contract expects.
    System.exit(exit.get());
    return exit.get();
  }

  /**
   * @throws IllegalArgumentException naming what is wrong
   */
  ProxyOptions options() {
    ProxyOptions o = new ProxyOptions();
    int eq = function.indexOf('=');
    if (eq <= 0) {
      throw new IllegalArgumentException("--function takes NAME=REFERENCE, not '" + function + "'");
    }
    o.setFunction(function.substring(0, eq), function.substring(eq + 1));
    o.setSocket(socket);
    if (host != null) {
      o.setHost(host);
    }
    String envPort = env("PORT");
    if (port != null) {
      o.setPort(port);
    } else if (envPort != null && !envPort.isBlank()) {
      try {
        o.setPort(Integer.parseInt(envPort.trim()));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("PORT=" + envPort + " is not a port number");
      }
    }
    Map<String, Object> functionOptions = new LinkedHashMap<>();
    functionOptions.put("keepAlive", keepAlive);
    functionOptions.put("maxInstances", maxInstances);
    functionOptions.put("minInstances", minInstances);
    functionOptions.put("queueCapacity", queueCapacity);
    functionOptions.forEach((k, v) -> {
      if (v != null) {
        o.putFunctionOption(k, v.toString().trim());
      }
    });
    o.setDrainTimeout(ProxyOptions.parseDuration(drainTimeout, "--drain-timeout"));
    o.setTenantKey(env("THAW_FUNCTION_KEY"));
    return o.validate();
  }

}
