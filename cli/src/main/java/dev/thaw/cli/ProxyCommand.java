package dev.thaw.cli;

import dev.thaw.server.proxy.FunctionProxy;
import dev.thaw.server.proxy.ProxyOptions;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
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
 * {@code thaw proxy}: node mode's function pod ({@link FunctionProxy}). {@link ThawCli#main} runs it without building
 * the rest of the command tree, and it loads no HTTP or JSON library: its start time is its reason to be.
 */
@Command(name = "proxy",
    description = {
        "Node mode's function pod: register one function with the node server",
        "(thaw serve --socket) through its Unix socket, then forward that function's",
        "routes to it (native invoke and state, KServe v2, OpenAI completions) with the",
        "token the server handed over. Holds no GPU. Readiness (/v2/health/ready) is the",
        "function's, asked of the node server. Runs until SIGTERM or SIGINT, then drains",
        "and exits 0; exits 1 when the node server refuses the registration.",
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
      description = "The node server's Unix socket (default: ${DEFAULT-VALUE}).", defaultValue = "/run/thaw/thaw.sock")
  Path socket;

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

  @Option(names = "--drain-timeout", paramLabel = "DURATION", defaultValue = "30s",
      description = "On SIGTERM, how long requests in flight may take to finish (default: ${DEFAULT-VALUE}).")
  String drainTimeout;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  private final Map<String, String> environment;

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

  @Override
  public Integer call() throws Exception {
    ProxyOptions options = options();
    // Its registrations (and why one failed) are the pod's log: INFO, where the rest of the CLI stays at WARN.
    System.setProperty("org.slf4j.simpleLogger.log." + FunctionProxy.LOG_NAME, "info");
    PrintWriter out = spec.commandLine().getOut();
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
      PrintWriter err = spec.commandLine().getErr();
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

  private ProxyOptions options() {
    ProxyOptions o = new ProxyOptions();
    try {
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
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
  }
}
