package dev.thaw.cli;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.StrictJson;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.Tags;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.impl.PoolInstances;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PlacementCosts;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.tiers.ImageTiers;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.image.ImageManifest;
import dev.thaw.server.StartupTimeline;
import io.micrometer.core.instrument.Timer;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Vertx;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.ArrayList;
import java.util.List;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;
import sun.misc.Signal;

/**
 * {@code thaw serve}: the restore server in the foreground until SIGTERM or SIGINT, which drain it (new requests
 * refused, queued and in-flight ones finished within the drain timeout) and exit 0.
 *
 * <p>Under Knative ({@code K_SERVICE} set) it obeys the runtime contract: {@code $PORT}, the {@code K_*} names on
 * every log line and metric, readiness on {@code /v2/health/ready} once the functions can serve, the store opened
 * read-only and nothing written outside {@code /tmp}, SIGTERM drain.
 *
 * <p>In node mode ({@code --socket PATH}) it is the node's server: function pods ({@code thaw proxy}) register their
 * functions through the socket by registry reference, and it pulls their images into its store.
 */
@Command(name = "serve",
    header = "Serve functions from the image store over HTTP.",
    description = {
        "The native API (/v1/functions), KServe v2 (/v2), OpenAI's completions, chat and models (/v1/completions, "
            + "/v1/chat/completions, /v1/models) and /metrics (docs/design/server.md). Runs until SIGTERM or SIGINT, "
            + "then drains and exits 0.",
        "",
        "Error bodies name the request (requestId, also in the Thaw-Request-Id header); a server-side failure's "
            + "detail is in the log under that id.",
        ""},
    footerHeading = "%nEnvironment:%n",
    footer = {
        "  PORT                the port when --port is not given (Knative sets it)",
        "  K_SERVICE, K_REVISION, K_CONFIGURATION",
        "                      Knative's names: labels on every log line and metric;",
        "                      K_SERVICE also opens the store read-only and turns",
        "                      the host cache off unless it is asked for",
        "  THAW_ADMIN_TOKEN    the admin API's bearer token (default: the file",
        "                      admin-token in the store, made at first start)",
        "  THAW_REGISTRY_AUTH  registry logins (Docker's config.json) for functions",
        "                      registered by a registry reference",
        "",
        "Examples:",
        "  thaw build --function dev.thaw.examples.mlp.MlpFunction \\",
        "      --config '{\"layers\": [2, 16, 3]}' --tag mlp:1",
        "  thaw serve --function mlp=mlp:1",
        "  curl -s localhost:8080/v1/functions/mlp/invoke \\",
        "      -H 'Content-Type: application/json' -d '{\"inputs\": [[0.1, 0.2]]}'",
        "  thaw serve --socket /run/thaw/thaw.sock \\",
        "      --function gpt2=registry.example.com/thaw/gpt2:large"})
final class ServeCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  DeviceOption device;

  @Mixin
  StoreOption store;

  @Option(names = "--host", paramLabel = "ADDRESS",
      description = "Address to listen on (default: 127.0.0.1; 0.0.0.0 for every interface).")
  String host;

  @Option(names = "--port", paramLabel = "PORT", description = "Port to listen on (default: $PORT, else 8080; 0: any).")
  Integer port;

  @Option(names = "--invoke-port", paramLabel = "PORT",
      description = "A separate port for the invoke endpoints only, keeping the admin API and metrics off it.")
  Integer invokePort;

  @Option(names = "--function", paramLabel = "NAME=TAG|REF", description = {"Serve the image TAG as NAME (repeatable).",
      "TAG may name a tensor-parallel group (its ranks tagged TAG-rank0..): pool-backed instances only.",
      "REF, a registry reference (HOST[:PORT]/REPOSITORY[:TAG]), is pulled into the store first."})
  Map<String, String> functions = new LinkedHashMap<>();

  @Option(names = "--socket", paramLabel = "PATH", description = {"Also listen on a Unix domain socket (node mode).",
      "Function pods (thaw proxy) register their functions and forward their requests through it."})
  Path socket;

  @Option(names = "--socket-only", description = "Listen on the --socket only, on no TCP port.")
  boolean socketOnly;

  @Mixin
  RegistryOption registry;

  @Option(names = "--config", paramLabel = "FILE", description = "Server options as JSON (see docs/design/server.md).")
  Path config;

  @Option(names = "--instances", paramLabel = "pool|in-process", defaultValue = "pool",
      description = "How instances run: pool (the default: one worker process each, from a pool of warm ones) or "
          + "in-process (contexts in this process; one tenant, images must not share addresses).")
  String instances;

  @Option(names = "--idle-workers", paramLabel = "N", defaultValue = "1",
      description = "Warm idle workers the pool keeps per device (default: ${DEFAULT-VALUE}).")
  int idleWorkers;

  @Option(names = "--max-workers", paramLabel = "N",
      description = {"Worker processes the pool keeps per device, idle and in use (default: 8, or the config's).",
          "Instances at once on a device are this less the idle workers."})
  Integer maxWorkers;

  @Option(names = "--max-starting", paramLabel = "N",
      description = {"Worker processes the pool starts at once per device (default: a quarter of the cores, at least 2).",
          "A cold start that finds no blank worker waits for one to start: this bounds that rate."})
  Integer maxStarting;

  @Option(names = "--recycle-limit", paramLabel = "N",
      description = {"Times a worker that scaled to zero may drop its image and become blank again for another "
          + "function (default: 64, or the config's).",
          "Its device memory is scrubbed and its state dropped; 0: every worker process becomes one image in its "
              + "life."})
  Integer recycleLimit;

  @Option(names = "--tier-policy", paramLabel = "recency|registration",
      description = {"What the host cache, the HBM tier and blank workers keep: recency (the default) or registration.",
          "recency: cold starts decide; registration stages every image as it comes (the baseline)."})
  String tierPolicy;

  @Option(names = "--host-cache", paramLabel = "SIZE",
      description = "The pinned host image cache pool workers restore from, e.g. 8g, 512m, 0 for none (default: "
          + "hostCacheBytes of the config, else 8g or a quarter of RAM, whichever is less; under Knative, none).")
  String hostCache;

  @Option(names = "--hbm-tier", paramLabel = "SIZE",
      description = "Device memory per GPU that weights of scaled-in instances keep for the next one, e.g. 16g, 0 for "
          + "none (default: hbmTierBytes of the config, else 16g).")
  String hbmTier;

  @Option(names = "--max-helpers", paramLabel = "N",
      description = {"Other GPUs' links a cold start from the host cache may borrow besides its own (idle ones only).",
          "0 for none (default: maxHelpers of the config, else 3)."})
  Integer maxHelpers;

  @Option(names = "--helper-share", paramLabel = "SHARE",
      description = {"The part of a borrowed GPU's link a cold start may use while that GPU hosts instances, over"
          + " (0, 1]. A GPU that hosts none lends its whole link.", "Default: helperShare of the config, else 0.5."})
  Double helperShare;

  @Option(names = "--wake-ahead", paramLabel = "DURATION",
      description = "How long before a long warm invoke's predicted end the threads that carry its answer stop "
          + "sleeping and poll for it, e.g. 500us, 1ms, 0 for never (default: wakeAhead of the config, else 500us).")
  String wakeAhead;

  @Option(names = "--max-connections", paramLabel = "N",
      description = "Connections each port keeps open (default: maxConnections of the config, else "
          + ServerOptions.DEFAULT_MAX_CONNECTIONS + "); one more closes the oldest without a request in flight. "
          + "headerTimeout, bodyTimeout and idleTimeout of the config bound how long a request's head, its body and "
          + "the wait for the next request may take (default 10s, 30s, 60s).")
  Integer maxConnections;

  @Option(names = "--read-only-store", description = "Open the store read-only: nothing is written to its folder (no admin token is kept). "
          + "Implied under Knative.")
  boolean readOnlyStore;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() throws Exception {
    StartupTimeline timeline = StartupTimeline.sinceProcessStart();
    timeline.markAt("main", ThawCli.MAIN_NANOS);
    timeline.mark("command");
    ServerOptions options = options();
    // Under Knative the store belongs to the container image: read it, write nothing there (no lock, no log, no
    // admin token); the contract allows writes to /tmp only.
    boolean knative = cli.env("K_SERVICE") != null;
    boolean readOnly = readOnlyStore || knative;
    Path storePath = store.resolve(cli);
    if (!readOnly) {
      options.setStorePath(storePath);
    }
    if (!instances.equals("pool") && !instances.equals("in-process")) {
      throw new ParameterException(spec.commandLine(), "--instances is pool or in-process, not " + instances);
    }
    for (Map.Entry<String, FunctionOptions> f : options.functions().entrySet()) {
      if (readOnly && RegistryReference.looksLikeReference(f.getValue().image())) {
        throw new ParameterException(spec.commandLine(), "function '" + f.getKey() + "': " + f.getValue().image()
            + " is a registry reference, and the store is read-only" + (knative ? " under Knative" : "")
            + ": pull it into the store first (thaw pull, e.g. in an init container)");
      }
    }
    timeline.mark("options");
    // One INFO line per request, one per cold start (the worker's phases), one per server-side failure; the rest stay
    // at the CLI's WARN.
    System.setProperty("org.slf4j.simpleLogger.log." + ServerLogs.REQUESTS, "info");
    System.setProperty("org.slf4j.simpleLogger.log." + ServerLogs.INSTANCES, "info");
    // A 5xx body names only its request's id: the detail an operator looks up by it is in this log.
    System.setProperty("org.slf4j.simpleLogger.log." + ServerLogs.ERRORS, "info");
    PrintWriter out = spec.commandLine().getOut();

    // The way to the first response is the first instance's: for the pool, a worker's JVM, cuInit and context;
    // in process, this process's cuInit and context. Each starts first, and the store, the driver's device list and
    // the HTTP server come up beside it (docs/design/server.md, "Start to first response").
    CompletableFuture<Vertx> vertx = startHttpSide(timeline);
    EarlyPool early = instances.equals("pool") ? EarlyPool.start(this, options, storePath, timeline) : null;
    if (early == null) {
      // ThawCli.main prelaunched a worker for the pool in case: in process, no pool takes it.
      ContextPool.discardPrelaunched();
    }
    CompletableFuture<GpuDriver> opening = new CompletableFuture<>();
    CompletableFuture<InProcessInstances.Prepared> prepared = new CompletableFuture<>();
    boolean prepare = instances.equals("in-process") && !options.functions().isEmpty();
    Threads.startDaemon(() -> {
      try {
        GpuDriver d = cli.openDriver(device.choice, spec);
        timeline.mark("driver");
        // In process, a function named at start will start: its context is made now, beside everything else.
        prepared.complete(prepare ? InProcessInstances.prepareContext(d, d.devices().get(0).ordinal(), timeline)
            : null);
        opening.complete(d);
      } catch (Throwable e) {
        prepared.complete(null);
        opening.completeExceptionally(e);
      }
    }, "thaw-serve-driver");
    ChunkStore s = null;
    GpuDriver driver = null;
    InstanceFactory factory;
    try {
      // A node server's store is its own: on a new node it is made at the first start, then filled by pulls.
      s = cli.openStore(storePath, readOnly ? StoreAccess.READ : socket != null ? StoreAccess.CREATE
          : StoreAccess.WRITE);
      timeline.mark("store");
      driver = join(opening);
      factory = factory(driver, s, storePath, early, prepared.join(), timeline);
    } catch (RuntimeException | Error e) {
      vertx.thenAccept(Vertx::close);
      prepared.thenAccept(p -> {
        if (p != null) {
          p.closeUntaken();
        }
      });
      if (early != null) {
        early.close();
      }
      closeQuietly(s);
      if (driver != null) {
        driver.close();
      } else {
        opening.thenAccept(GpuDriver::close);
      }
      throw e;
    }
    ThawServer server;
    try {
      server = ThawServer.start(options, s, factory, timeline, vertx.join());
    } catch (IllegalArgumentException e) {
      s.close();
      driver.close();
      if (e.getCause() instanceof ImageNotFoundException) {
        throw e; // no such image: exit 4, as every command that names one
      }
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    } catch (RuntimeException e) {
      s.close();
      driver.close();
      throw e;
    }
    out.printf("device   %s (%s)%n", driver.devices().get(0).describe(), driver.name());
    if (driver.isSimulated()) {
      out.println(CheckCommand.SIMULATED_NOTE);
    }
    out.printf("store    %s%s%n", storePath, readOnly ? " (read-only)" : "");
    if (server.socketPath() != null) {
      out.printf("socket   %s (node mode: function pods register and invoke here)%n", server.socketPath());
    }
    if (server.instances().equals("pool")) {
      out.printf("cache    %s%n", options.hostCacheBytes() == 0 ? "none (workers read the store)"
          : (options.hostCacheBytes() >> 20) + " MiB pinned host cache; images staged at registration; HBM tier "
          + (options.hbmTierBytes() >> 20) + " MiB per GPU");
      if (options.hostCacheBytes() > 0 && driver.devices().size() > 1) {
        out.println(options.maxHelpers() == 0 ? "helpers  none: a cold start copies through its own GPU's link"
            : String.format(Locale.ROOT, "helpers  a cold start borrows up to %d idle GPUs' links, each at share %.2f"
            + " (whole where the GPU hosts no instance)",
            options.maxHelpers(), options.helperShare()));
      }
    }
    options.functions().forEach((name, f) -> out.printf("function %s = %s%s%n", name, f.image(),
        RegistryReference.looksLikeReference(f.image()) ? " (pulled in the background)" : ""));
    out.println("admin    " + (server.adminTokenFile() != null ? "bearer token in " + server.adminTokenFile()
        : options.adminToken() != null ? "bearer token from THAW_ADMIN_TOKEN or the config"
        : "no token kept (read-only store): the admin API is closed; set THAW_ADMIN_TOKEN to open it"));
    if (server.invokePort() != ServerOptions.NO_INVOKE_PORT) {
      out.printf("invoke   http://%s:%d%n", options.host(), server.invokePort());
    }
    out.printf("listening on %s (instances: %s)%n", server.url(), server.instances());
    out.flush();

    CountDownLatch stopped = new CountDownLatch(1);
    Duration drain = options.drainTimeout();
    ChunkStore openStore = s;
    GpuDriver openDriver = driver;
    Runnable stop = () -> {
      boolean drained = server.drain(drain);
      server.close();
      openStore.close();
      openDriver.close();
      out.println(drained ? "drained; bye" : "drain timed out after " + drain.toMillis() + " ms; bye");
      out.flush();
      stopped.countDown();
      // A signal's exit status would be 143; a drained server exits 0, as the Knative contract expects.
      System.exit(drained ? ThawCli.EXIT_OK : ThawCli.EXIT_FAILED);
    };
    // SIGTERM and SIGINT are handled, not left to shutdown hooks: hooks run all at once, and the pool's would kill
    // the workers of in-flight requests while the drain waits for them.
    for (String signal : new String[] {"TERM", "INT"}) {
      Signal.handle(new Signal(signal), sig -> new Thread(stop, "thaw-serve-drain").start());
    }
    stopped.await();
    return ThawCli.EXIT_OK;
  }

  /**
   * Vert.x, made on a thread of its own while this one parses options and opens the store, with the classes the
   * server's start loads next (metrics and their timers, a manifest's reader) loaded beside it: none of it is on the
   * way to the first worker or context, so it should cost the first response nothing.
   */
  private static CompletableFuture<Vertx> startHttpSide(StartupTimeline timeline) {
    CompletableFuture<Vertx> made = new CompletableFuture<>();
    Thread t = Threads.startDaemon(() -> {
      try {
        Vertx v = Vertx.vertx();
        made.complete(v);
        timeline.mark("vertx made");
      } catch (Throwable e) {
        made.completeExceptionally(e);
        return;
      }
      try {
        // A timer with a histogram too, as the registration makes per function: the first one in a JVM is slow.
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        Timer.builder("thaw.warmup").publishPercentileHistogram().register(registry)
            .record(Duration.ofMillis(1));
        registry.close();
        try (InputStream in = ServeCommand.class.getResourceAsStream(WARM_MANIFEST)) {
          if (in != null) {
            ImageManifest.read(in.readAllBytes());
          }
        }
      } catch (Exception | LinkageError e) {
        // Loading ahead is best effort: the server loads what it needs when it needs it.
      }
    }, "thaw-serve-http");
    return made;
  }

  /** A small real manifest (the pool's warm-up one), read once ahead so the registration's read finds Jackson warm. */
  private static final String WARM_MANIFEST = "/dev/thaw/pool/worker/warmup-manifest.json";

  private InstanceFactory factory(GpuDriver driver, ChunkStore s, Path storePath, EarlyPool early,
      InProcessInstances.Prepared prepared, StartupTimeline timeline) {
    if (instances.equals("in-process")) {
      InProcessInstances f = new InProcessInstances(driver, s).reportStartsTo(timeline);
      return prepared == null ? f : f.takePrepared(prepared);
    }
    List<Integer> devices = new ArrayList<>();
    driver.devices().forEach(d -> devices.add(d.ordinal()));
    if (early == null) {
      throw new IllegalStateException("the pool was not started");
    }
    return early.instances(driver, devices, s, storePath).reportStartsTo(timeline);
  }

  /**
   * The pool, started before the driver is open: its first worker spawns on device 0 (there is one wherever there is
   * a device) while this process opens the store and the driver; once the driver says how many devices there are,
   * the pool serves them all.
   */
  private static final class EarlyPool implements AutoCloseable {
    private final HostImageCache cache;
    private final ContextPool pool;
    private final long hbmTierBytes;
    private final Duration retryAfter;
    private final String tierPolicy;
    private final PlacementCosts costs;

    private EarlyPool(HostImageCache cache, ContextPool pool, long hbmTierBytes, Duration retryAfter,
        String tierPolicy, PlacementCosts costs) {
      this.cache = cache;
      this.pool = pool;
      this.tierPolicy = tierPolicy;
      this.costs = costs;
      this.hbmTierBytes = hbmTierBytes;
      this.retryAfter = retryAfter;
    }

    static EarlyPool start(ServeCommand c, ServerOptions options, Path storePath, StartupTimeline timeline) {
      String choice;
      try {
        choice = (c.device.choice != null ? c.device.choice : DeviceChoice.parse(c.cli.env(DeviceChoice.ENV)))
            .name().toLowerCase(Locale.ROOT);
      } catch (IllegalArgumentException e) {
        throw new ParameterException(c.spec.commandLine(), e.getMessage(), e);
      }
      // The images the server serves from its first request are prepared by each worker as it starts.
      List<String> atStart = options.functions().values().stream().map(FunctionOptions::image)
          .filter(image -> !RegistryReference.looksLikeReference(image)).distinct()
          .limit(ContextPoolOptions.DEFAULT_MAX_PREPARED_IMAGES).toList();
      ContextPoolOptions poolOptions = new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(c.idleWorkers)
          .setMaxWorkers(Math.max(options.maxWorkers(), c.idleWorkers + 1)).setMaxStarting(options.maxStarting())
          .setRecycleLimit(options.recycleLimit())
          .setDeviceChoice(choice).setStorePath(storePath).setWarmupAfterReady(true).setPrepareAtStart(atStart)
          .setWakeAhead(options.wakeAhead()).setHelperLinks(options.maxHelpers());
      HostImageCache cache = null;
      if (options.hostCacheBytes() > 0) {
        try {
          cache = HostImageCache.create(new HostCacheOptions().setCapacityBytes(options.hostCacheBytes()));
        } catch (IOException e) {
          throw new UncheckedIOException("cannot create the host image cache (" + options.hostCacheBytes()
              + " bytes)", e);
        }
        poolOptions.setHostCachePath(cache.path());
      }
      try {
        ContextPool pool = ContextPool.create(poolOptions);
        timeline.mark("pool started");
        PlacementCosts costs = new PlacementCosts().setMaxHelpers(options.maxHelpers())
          .setHelperShare(options.helperShare());
      return new EarlyPool(cache, pool, options.hbmTierBytes(), options.retryAfter(), options.tierPolicy(), costs);
      } catch (RuntimeException | Error e) {
        if (cache != null) {
          cache.close();
        }
        throw e;
      }
    }

    /** The pool, serving every device of {@code driver}, as the server's instance factory (which then owns it). */
    PoolInstances instances(GpuDriver driver, List<Integer> devices, ChunkStore s, Path storePath) {
      pool.addDevices(devices);
      return new PoolInstances(pool, cache, cache == null ? 0 : hbmTierBytes, s, storePath, driver.devices(),
          Duration.ofSeconds(120), retryAfter, tierPolicy.equals("registration") ? ImageTiers.Staging.ALWAYS
              : ImageTiers.Staging.IF_FREE).placeWith(costs, driver::canAccessPeer);
    }

    @Override
    public void close() {
      pool.close();
      if (cache != null) {
        cache.close();
      }
    }
  }

  /** The driver from its thread; its failure as the caller would have thrown it. */
  private static GpuDriver join(CompletableFuture<GpuDriver> opening) throws InterruptedException {
    try {
      return opening.get();
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException r) {
        throw r;
      }
      if (c instanceof Error err) {
        throw err;
      }
      throw new IllegalStateException(c);
    }
  }

  private static void closeQuietly(ChunkStore s) {
    if (s != null) {
      try {
        s.close();
      } catch (RuntimeException e) {
        // Failing already.
      }
    }
  }

  private ServerOptions options() {
    ServerOptions o;
    boolean cacheConfigured = hostCache != null;
    if (config != null) {
      try {
        JsonNode json = StrictJson.read(Files.readString(config));
        o = ServerOptions.fromJson(json);
        cacheConfigured |= json.has("hostCacheBytes");
      } catch (JsonProcessingException e) {
        throw new ParameterException(spec.commandLine(), "config " + config + " is not JSON: " + StrictJson.problem(e),
            e);
      } catch (NoSuchFileException e) {
        throw new ParameterException(spec.commandLine(), "config file " + config + " does not exist", e);
      } catch (IOException | IllegalArgumentException e) {
        throw new ParameterException(spec.commandLine(), "config " + config + ": " + e.getMessage(), e);
      }
    } else {
      o = new ServerOptions();
    }
    try {
      if (host != null) {
        o.setHost(host);
      }
      String envPort = cli.env("PORT");
      if (port != null) {
        o.setPort(port);
      } else if (envPort != null && !envPort.isBlank()) {
        try {
          o.setPort(Integer.parseInt(envPort.trim()));
        } catch (NumberFormatException e) {
          throw new IllegalArgumentException("PORT=" + envPort + " is not a port number");
        }
      }
      if (invokePort != null) {
        o.setInvokePort(invokePort);
      }
      if (socket != null) {
        o.setSocketPath(socket);
      }
      if (socketOnly) {
        if (o.socketPath() == null) {
          throw new IllegalArgumentException("--socket-only needs --socket PATH");
        }
        o.setPort(ServerOptions.NO_PORT);
      }
      if (hostCache != null) {
        o.setHostCacheBytes(bytes(hostCache, "--host-cache"));
      } else if (!cacheConfigured && cli.env("K_SERVICE") != null) {
        // A Knative pod serves its functions until it is scaled in, long before an instance's keepAlive ends: no
        // second start would read the cache, and registering it (pinning is paid per page) delays each worker on
        // the way to the first response. Asked for, it is there.
        o.setHostCacheBytes(0);
      }
      if (maxConnections != null) {
        o.setMaxConnections(maxConnections);
      }
      if (hbmTier != null) {
        o.setHbmTierBytes(bytes(hbmTier, "--hbm-tier"));
      }
      if (wakeAhead != null) {
        o.setWakeAhead(ServerOptions.parseDuration(wakeAhead, "--wake-ahead"));
      }
      if (maxWorkers != null) {
        o.setMaxWorkers(maxWorkers);
      }
      if (maxStarting != null) {
        o.setMaxStarting(maxStarting);
      }
      if (recycleLimit != null) {
        o.setRecycleLimit(recycleLimit);
      }
      if (tierPolicy != null) {
        o.setTierPolicy(tierPolicy);
      }
      if (maxHelpers != null) {
        o.setMaxHelpers(maxHelpers);
      }
      if (helperShare != null) {
        o.setHelperShare(helperShare);
      }
      String token = cli.env("THAW_ADMIN_TOKEN");
      if (token != null && !token.isBlank()) {
        o.setAdminToken(token.trim());
      }
      for (Map.Entry<String, String> f : functions.entrySet()) {
        Tags.check(f.getValue());
        FunctionOptions existing = o.functions().get(f.getKey());
        o.addFunction(f.getKey(), (existing == null ? new FunctionOptions() : existing).setImage(f.getValue()));
      }
      RegistryOptions pulls = registry.options(cli, spec);
      for (FunctionOptions f : o.functions().values()) {
        if (RegistryReference.looksLikeReference(f.image())) {
          RegistryReference ref = RegistryOption.parse(f.image(), spec);
          if (registry.plainHttp) {
            pulls.addPlainHttp(ref.registry());
          }
        }
      }
      o.setRegistry(pulls);
      label(o, "service", "K_SERVICE");
      label(o, "revision", "K_REVISION");
      label(o, "configuration", "K_CONFIGURATION");
    } catch (IllegalArgumentException e) {
      throw new ParameterException(spec.commandLine(), e.getMessage(), e);
    }
    return o;
  }

  /** {@code 8g}, {@code 512m}, {@code 64k} or a number of bytes. */
  static long bytes(String size, String option) {
    Matcher m = Pattern.compile("([0-9]+)([kKmMgGtT]?)[iI]?[bB]?").matcher(size.trim());
    if (!m.matches()) {
      throw new IllegalArgumentException(option + " takes a size such as 8g, 512m or 0, not '" + size + "'");
    }
    int shift = switch (m.group(2).toLowerCase(Locale.ROOT)) {
      case "k" -> 10;
      case "m" -> 20;
      case "g" -> 30;
      case "t" -> 40;
      default -> 0;
    };
    long n = Long.parseLong(m.group(1));
    if (n > (Long.MAX_VALUE >> shift)) {
      throw new IllegalArgumentException(option + " " + size + " is too large");
    }
    return n << shift;
  }

  private void label(ServerOptions o, String label, String env) {
    String v = cli.env(env);
    if (v != null && !v.isBlank()) {
      o.putLabel(label, v);
    }
  }
}
