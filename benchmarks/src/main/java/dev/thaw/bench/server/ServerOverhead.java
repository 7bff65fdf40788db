package dev.thaw.bench.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.ThawServer;
import dev.thaw.server.impl.InProcessInstances;
import dev.thaw.server.impl.PoolInstances;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The restore server's own cost on a warm invoke, against the function invoked in this process: one run builds
 * the function's image (the MLP by default) on the device {@code THAW_DEVICE} picks, then measures, in order,
 *
 * <ol>
 *   <li>the <b>anchor</b>: the function's warm invoke in this process, through an in-process instance
 *       ({@link FunctionInstance#invokeBlocking}, the request already parsed), on the same device;
 *   <li>a {@link ThawServer} on loopback with <b>in-process</b> instances, then one with <b>pool</b>-backed
 *       instances (a worker process), each warmed, then timed request by request on one keep-alive HTTP/1.1
 *       connection ({@link KeepAliveClient}; the first {@value #EARLY_REQUESTS} warm-up requests, before the JIT
 *       compiled the server's path, are reported apart): the client's round trip and the server's
 *       {@code Server-Timing} ({@code server}: request in to response out, inside the server; {@code invoke};
 *       {@code function}: the function's own invoke where it ran); and {@code GET /v2/health/live} on the same
 *       connection, the HTTP floor;
 *   <li>the anchor again, so that drift over the run shows.
 *   <li>for each series of timed requests, what each thread of the process and of its workers did per request
 *       ({@link ThreadUsage}: CPU, time waiting for a core, wake-ups).
 * </ol>
 *
 * <p>Overhead = round trip − anchor p50, per request. On the sim device the function's time is a simulated
 * number, but the overhead is CPU work the server does and is measured as it is.
 *
 * <p>The warm-up ({@code --warmup} requests, of {@code --warmup-request} when given) must be long enough for the JIT
 * to compile the server's path (thousands of requests: a few hundred leave it in C1's profiled code, which costs
 * several times more). For a slow function, warm up with a short request of the same function (GPT-2: one new
 * token) and time the long one after {@value #STEP_WARMUP} of its own.
 *
 * <p>{@code --spin-client}: the client polls for each response instead of sleeping in {@code read}, so that its own
 * wake-up after a long invoke stays out of the round trip (see {@link KeepAliveClient}).
 *
 * <p>{@code --wait-micros 100,1000,4000,10000} sweeps the invoke's length instead: the wait function
 * ({@code dev.thaw.examples.wait.WaitFunction}, a kernel that waits that long), warmed up with waits of 0, then timed
 * at each length in turn against its own anchor ({@code steps} in the result).
 *
 * <p>{@code --instances} names the servers in turn: {@code in-process} or {@code pool}, each with the server's
 * wake-ahead ({@link ServerOptions#setWakeAhead}) after a colon where it is not the default: {@code pool:0,pool}
 * measures a pooled server without it and with it in one run.
 *
 * <p>Usage: {@code ServerOverhead [--function CLASS --config JSON --request FILE [--warmup-request FILE] |
 * --wait-micros LIST] [--requests 2000] [--warmup 3000] [--instances in-process,pool] [--worker-jvm "-XX:+UseSerialGC
 * -Xmx2g"] [--spin-client] [--out result.json]}; without {@code --function}, the MLP of {@code scripts/gpu/server-run.sh} and one row
 * of inputs.
 */
public final class ServerOverhead {

  static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);
  static final String MLP = "dev.thaw.examples.mlp.MlpFunction";
  static final String TAG = "overhead:1";
  static final String FUNCTION = "f";
  /** The MLP and request {@code scripts/gpu/server-run.sh} serves. */
  static final String DEFAULT_CONFIG = "{\"layers\": [64, 256, 256, 10], \"seed\": 42}";
  /** The first warm-up requests, reported apart ({@code firstWarmRoundTripMicros}). */
  static final int EARLY_REQUESTS = 100;

  /** The wait function ({@code --wait-micros}): an invoke as long as its request says. */
  static final String WAIT = "dev.thaw.examples.wait.WaitFunction";
  /**
   * Each step of a sweep runs about this long per series (anchor, each server): at most {@code --requests}, at least
   * {@value #MIN_STEP_REQUESTS} requests (or {@code --requests} if fewer).
   */
  static final long STEP_BUDGET_MICROS = 2_000_000;
  static final int MIN_STEP_REQUESTS = 100;
  /** Requests at a step's own length before its timed ones (the server's path is compiled by the common warm-up). */
  static final int STEP_WARMUP = 20;
  /** Warm-up of the second anchor, in a process whose JIT has compiled the function already. */
  static final int AFTER_WARMUP = 500;

  /** What one run measures. */
  record Options(String function, int requests, int warmup, List<String> instances, String config, byte[] request,
      byte[] warmupRequest, List<String> workerJvm, Path out, List<Long> waitMicros, boolean spinClient) {}

  /**
   * One series of timed requests: {@code name} labels it in a sweep, {@code request} is sent {@code requests} times
   * after {@code warmup} untimed ones.
   */
  record Step(String name, byte[] request, int requests, int warmup) {}

  public static void main(String[] args) throws Exception {
    String function = MLP;
    int requests = 2000;
    int warmup = 3000;
    List<String> instances = List.of("in-process", "pool");
    String config = DEFAULT_CONFIG;
    byte[] request = null;
    byte[] warmupRequest = null;
    List<String> workerJvm = ContextPoolOptions.DEFAULT_JVM_OPTIONS;
    Path out = null;
    List<Long> waitMicros = List.of();
    boolean spinClient = false;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--function" -> function = args[++i];
        case "--requests" -> requests = Integer.parseInt(args[++i]);
        case "--warmup" -> warmup = Integer.parseInt(args[++i]);
        case "--instances" -> instances = List.of(args[++i].split(","));
        case "--config" -> config = args[++i];
        case "--request" -> request = Files.readAllBytes(Path.of(args[++i]));
        case "--warmup-request" -> warmupRequest = Files.readAllBytes(Path.of(args[++i]));
        case "--worker-jvm" -> workerJvm = List.of(args[++i].trim().split("\\s+"));
        case "--out" -> out = Path.of(args[++i]);
        case "--spin-client" -> spinClient = true;
        case "--wait-micros" -> waitMicros = Arrays.stream(args[++i].split(",")).map(Long::parseLong).toList();
        default -> throw new IllegalArgumentException("unknown argument " + args[i] + "; usage: ServerOverhead "
            + "[--function CLASS --config JSON --request FILE | --wait-micros 100,1000,...] [--requests N] "
            + "[--warmup N] [--warmup-request FILE] [--instances in-process,pool,pool:0,...] [--worker-jvm OPTIONS] "
            + "[--spin-client] [--out FILE]");
      }
    }
    if (!waitMicros.isEmpty()) {
      function = WAIT;
      config = "{}";
      request = waitRequest(0);
      warmupRequest = request;
    } else if (request == null) {
      if (!function.equals(MLP)) {
        throw new IllegalArgumentException("--request FILE: a request for " + function);
      }
      request = defaultRequest(JSON.readTree(config));
    }
    ObjectNode result = run(new Options(function, requests, warmup, instances, config, request,
        warmupRequest == null ? request : warmupRequest, workerJvm, out, waitMicros, spinClient));
    System.out.println(summary(result));
    if (out != null) {
      Files.write(out, JSON.writeValueAsBytes(result));
    }
  }

  /** One row of the MLP's input width, as in the GPU script. */
  static byte[] defaultRequest(JsonNode config) {
    int width = config.path("layers").path(0).asInt(64);
    StringBuilder row = new StringBuilder("{\"inputs\": [[");
    double[] cycle = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8};
    for (int i = 0; i < width; i++) {
      row.append(i == 0 ? "" : ", ").append(cycle[i % cycle.length]);
    }
    return row.append("]]}").toString().getBytes(StandardCharsets.UTF_8);
  }

  /** {@code {"micros": N}}: a request of the wait function. */
  static byte[] waitRequest(long micros) {
    return ("{\"micros\": " + micros + "}").getBytes(StandardCharsets.UTF_8);
  }

  /**
   * What one run times: its one request (after {@value #STEP_WARMUP} of its own where the warm-up sent another), or,
   * for a sweep, one step per wait (fewer requests for longer ones).
   */
  static List<Step> steps(Options o) {
    if (o.waitMicros().isEmpty()) {
      return List.of(new Step("", o.request(), o.requests(),
          Arrays.equals(o.request(), o.warmupRequest()) ? 0 : STEP_WARMUP));
    }
    List<Step> steps = new ArrayList<>();
    for (long micros : o.waitMicros()) {
      int n = (int) Math.min(o.requests(), Math.max(MIN_STEP_REQUESTS, STEP_BUDGET_MICROS / Math.max(1, micros)));
      steps.add(new Step(micros + "us", waitRequest(micros), n, STEP_WARMUP));
    }
    return steps;
  }

  static ObjectNode run(Options o) throws Exception {
    Path work = Files.createTempDirectory("thaw-overhead");
    // The request log goes to a file, as a server's log would, not between the results.
    System.setProperty("org.slf4j.simpleLogger.logFile", work.resolve("requests.log").toString());
    ObjectNode result = JSON.createObjectNode();
    result.put("function", o.function()).put("requests", o.requests()).put("warmup", o.warmup())
        .put("config", o.config())
        .put("request", new String(o.request(), StandardCharsets.UTF_8))
        .put("warmupRequest", new String(o.warmupRequest(), StandardCharsets.UTF_8))
        .put("spinClient", o.spinClient());
    List<Step> steps = steps(o);
    Path storePath = work.resolve("store");
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.fromEnvironment())) {
      result.put("device", driver.devices().get(0).name() + (driver.isSimulated() ? " (SIMULATED)" : ""));
      result.put("simulated", driver.isSimulated());
      build(driver, storePath, o);
      try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath).setReadOnly(true))) {
        List<ObjectNode> anchors = anchor(driver, store, steps, o, o.warmup());
        Map<String, List<ObjectNode>> served = new LinkedHashMap<>();
        for (String kind : o.instances()) {
          served.put(kind, serve(kind, driver, store, storePath, steps, o));
        }
        // The function's code is compiled by now: the second anchor needs only a fresh instance warmed.
        List<ObjectNode> after = anchor(driver, store, steps, o, Math.min(o.warmup(), AFTER_WARMUP));
        ObjectNode stepsNode = steps.size() > 1 || !o.waitMicros().isEmpty() ? result.putObject("steps") : null;
        for (int i = 0; i < steps.size(); i++) {
          ObjectNode at = stepsNode == null ? result : stepsNode.putObject(steps.get(i).name());
          if (stepsNode != null) {
            at.put("waitMicros", o.waitMicros().get(i)).put("requests", steps.get(i).requests());
          }
          at.set("anchor", anchors.get(i));
          ObjectNode servers = at.putObject("servers");
          for (Map.Entry<String, List<ObjectNode>> e : served.entrySet()) {
            servers.set(e.getKey(), e.getValue().get(i));
          }
          at.set("anchorAfter", after.get(i));
          derive(at);
        }
      }
    } finally {
      deleteTree(work);
    }
    return result;
  }

  private static void build(GpuDriver driver, Path storePath, Options o) throws IOException {
    BuildOptions b = new BuildOptions().setFunctionClass(o.function()).setConfig(o.config()).setTag(TAG)
        .addSampleRequest(JSON.readTree(o.warmupRequest()));
    try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storePath));
        GpuContext ctx = driver.createContext(0)) {
      new ImageBuilder(store, new FastCdcChunker()).build(b, ctx, ProgressListener.NONE);
    }
  }

  /**
   * The function's warm invoke in this process: an in-process instance, the requests already parsed; warmed with
   * the run's request, then each step in turn.
   */
  private static List<ObjectNode> anchor(GpuDriver driver, RocksChunkStore store, List<Step> steps, Options o,
      int warmup) throws Exception {
    ImageManifest manifest = Images.manifest(store, TAG);
    List<ObjectNode> anchors = new ArrayList<>();
    try (FunctionInstance instance = new InProcessInstances(driver, store).startBlocking(TAG, manifest, 0)) {
      FunctionRequest warm = FunctionRequest.of(JSON.readTree(o.warmupRequest()));
      for (int i = 0; i < warmup; i++) {
        instance.invokeBlocking(warm);
      }
      for (Step step : steps) {
        FunctionRequest request = FunctionRequest.of(JSON.readTree(step.request()));
        for (int i = 0; i < step.warmup(); i++) {
          instance.invokeBlocking(request);
        }
        long[] ns = new long[step.requests()];
        for (int i = 0; i < ns.length; i++) {
          long t = System.nanoTime();
          instance.invokeBlocking(request);
          ns[i] = System.nanoTime() - t;
        }
        ObjectNode a = JSON.createObjectNode();
        a.set("invokeMicros", stats(ns));
        anchors.add(a);
      }
    }
    return anchors;
  }

  /**
   * @param series {@code in-process} or {@code pool}, with the server's wake-ahead after a colon where it is not the
   *     default ({@code pool:0} for none, {@code pool:1ms})
   */
  private static List<ObjectNode> serve(String series, GpuDriver driver, RocksChunkStore store, Path storePath,
      List<Step> steps, Options o) throws Exception {
    int colon = series.indexOf(':');
    String kind = colon < 0 ? series : series.substring(0, colon);
    Duration wakeAhead = colon < 0 ? ServerOptions.DEFAULT_WAKE_AHEAD
        : ServerOptions.parseDuration(series.substring(colon + 1), "--instances " + series);
    InstanceFactory factory = switch (kind) {
      case "in-process" -> new InProcessInstances(driver, store);
      case "pool" -> new PoolInstances(ContextPool.create(new ContextPoolOptions().setDevices(List.of(0))
          .setIdleTarget(1).setMaxWorkers(2).setStorePath(storePath).setJvmOptions(o.workerJvm())
          .setWakeAhead(wakeAhead)),
          store, storePath, driver.devices(), Duration.ofSeconds(120), Duration.ofSeconds(1));
      default -> throw new IllegalArgumentException("--instances: in-process or pool[:WAKE-AHEAD], not " + series);
    };
    ServerOptions options = new ServerOptions().setHost("127.0.0.1").setPort(0).setWakeAhead(wakeAhead)
        .addFunction(FUNCTION, new FunctionOptions().setImage(TAG).setMinInstances(1).setMaxInstances(1)
            .setKeepAlive(Duration.ofHours(1)));
    List<ObjectNode> results = new ArrayList<>();
    try (ThawServer server = ThawServer.start(options, store, factory);
        KeepAliveClient client = new KeepAliveClient("127.0.0.1", server.port(), o.spinClient())) {
      String path = "/v1/functions/" + FUNCTION + "/invoke";
      KeepAliveClient.Response first = client.post(path, "application/json", o.warmupRequest());
      if (first.status() != 200) {
        throw new IllegalStateException(kind + ": the first request got " + first.status() + ": " + first.text());
      }
      // The first warm requests of a fresh server run its path before the JIT compiled it: kept apart.
      long[] early = new long[Math.min(EARLY_REQUESTS, o.warmup())];
      for (int i = 0; i < o.warmup(); i++) {
        long t = System.nanoTime();
        expectOk(client.post(path, "application/json", o.warmupRequest()), kind);
        if (i < early.length) {
          early[i] = System.nanoTime() - t;
        }
        client.get("/v2/health/live");
      }
      for (Step step : steps) {
        for (int i = 0; i < step.warmup(); i++) {
          expectOk(client.post(path, "application/json", step.request()), kind);
        }
        long[] rtt = new long[step.requests()];
        Map<String, long[]> timing = new LinkedHashMap<>();
        ThreadUsage before = ThreadUsage.now();
        for (int i = 0; i < rtt.length; i++) {
          long t = System.nanoTime();
          KeepAliveClient.Response resp = client.post(path, "application/json", step.request());
          rtt[i] = System.nanoTime() - t;
          expectOk(resp, kind);
          if (!"warm".equals(resp.header("Thaw-Start"))) {
            throw new IllegalStateException(kind + ": a measured request was not warm: " + resp.headers());
          }
          for (Map.Entry<String, Double> e : serverTiming(resp.header("Server-Timing")).entrySet()) {
            timing.computeIfAbsent(e.getKey(), k -> new long[rtt.length])[i] = Math.round(e.getValue() * 1e6);
          }
        }
        ObjectNode threads = ThreadUsage.now().perRequestSince(before, rtt.length);
        ObjectNode r = JSON.createObjectNode();
        r.put("firstStart", first.header("Thaw-Start"));
        if (early.length > 0) {
          r.set("firstWarmRoundTripMicros", stats(early));
        }
        r.set("roundTripMicros", stats(rtt));
        ObjectNode st = r.putObject("serverTimingMicros");
        timing.forEach((k, v) -> st.set(k, stats(v)));
        r.set("samples", samples(rtt, timing));
        r.set("threadsPerRequest", threads);
        results.add(r);
      }
      long[] floor = new long[o.requests()];
      for (int i = 0; i < floor.length; i++) {
        long t = System.nanoTime();
        KeepAliveClient.Response resp = client.get("/v2/health/live");
        floor[i] = System.nanoTime() - t;
        if (resp.status() != 200) {
          throw new IllegalStateException("GET /v2/health/live: " + resp.status());
        }
      }
      for (ObjectNode r : results) {
        r.put("instance", server.instances());
        r.set("healthRoundTripMicros", stats(floor));
      }
    }
    return results;
  }

  private static void expectOk(KeepAliveClient.Response r, String kind) {
    if (r.status() != 200) {
      throw new IllegalStateException(kind + ": " + r.status() + " " + r.text());
    }
  }

  /** {@code queue;dur=0.004, invoke;dur=1.2, tier;desc="x"}: the durations, in order, in milliseconds. */
  public static Map<String, Double> serverTiming(String header) {
    Map<String, Double> phases = new LinkedHashMap<>();
    if (header == null) {
      return phases;
    }
    for (String part : header.split(",")) {
      String[] fields = part.trim().split(";");
      for (int i = 1; i < fields.length; i++) {
        if (fields[i].trim().startsWith("dur=")) {
          phases.put(fields[0].trim(), Double.parseDouble(fields[i].trim().substring(4)));
        }
      }
    }
    return phases;
  }

  /** Each request's round trip and Server-Timing, in microseconds, for per-request differences. */
  private static ObjectNode samples(long[] rtt, Map<String, long[]> timing) {
    ObjectNode s = JSON.createObjectNode();
    ArrayNode a = s.putArray("roundTrip");
    Arrays.stream(rtt).forEach(v -> a.add(v / 1000));
    timing.forEach((k, v) -> {
      ArrayNode t = s.putArray(k);
      Arrays.stream(v).forEach(x -> t.add(x / 1000));
    });
    return s;
  }

  /** The figures the write-up quotes: overheads against the anchor, and the server's own share. */
  static void derive(ObjectNode result) {
    double anchor = Math.min(result.path("anchor").path("invokeMicros").path("p50").asDouble(),
        result.path("anchorAfter").path("invokeMicros").path("p50").asDouble());
    result.put("anchorP50Micros", anchor);
    ObjectNode servers = (ObjectNode) result.path("servers");
    servers.fields().forEachRemaining(e -> {
      ObjectNode s = (ObjectNode) e.getValue();
      JsonNode samples = s.path("samples");
      long[] overhead = new long[samples.path("roundTrip").size()];
      for (int i = 0; i < overhead.length; i++) {
        overhead[i] = Math.round((samples.path("roundTrip").get(i).asDouble() - anchor) * 1000);
      }
      s.set("overheadMicros", stats(overhead));
      if (samples.has("server") && samples.has("function")) {
        long[] inside = new long[overhead.length];
        for (int i = 0; i < inside.length; i++) {
          inside[i] = (samples.get("server").get(i).asLong() - samples.get("function").get(i).asLong()) * 1000;
        }
        s.set("serverMinusFunctionMicros", stats(inside));
      }
      s.remove("samples");
    });
  }

  static ObjectNode stats(long[] nanos) {
    long[] s = nanos.clone();
    Arrays.sort(s);
    ObjectNode o = JSON.createObjectNode();
    o.put("count", s.length);
    o.put("p50", s[s.length / 2] / 1e3);
    o.put("p90", s[(int) (s.length * 0.90)] / 1e3);
    o.put("p99", s[(int) (s.length * 0.99)] / 1e3);
    o.put("min", s[0] / 1e3);
    o.put("mean", Arrays.stream(s).average().orElse(0) / 1e3);
    return o;
  }

  static String summary(ObjectNode r) {
    StringBuilder s = new StringBuilder();
    s.append(String.format(Locale.ROOT, "%s on %s; %d requests after %d warm-up%n", r.path("function").asText(),
        r.path("device").asText(), r.path("requests").asInt(), r.path("warmup").asInt()));
    if (!r.has("steps")) {
      summarize(s, r);
    }
    r.path("steps").fields().forEachRemaining(e -> {
      s.append(String.format(Locale.ROOT, "-- invoke waits %s (%d requests)%n", e.getKey(),
          e.getValue().path("requests").asInt()));
      summarize(s, e.getValue());
    });
    return s.toString();
  }

  private static void summarize(StringBuilder s, JsonNode r) {
    s.append(String.format(Locale.ROOT, "anchor: in-process invoke p50 %.1f us (after: %.1f us), p99 %.1f us%n",
        r.at("/anchor/invokeMicros/p50").asDouble(), r.at("/anchorAfter/invokeMicros/p50").asDouble(),
        r.at("/anchor/invokeMicros/p99").asDouble()));
    r.path("servers").fields().forEachRemaining(e -> {
      JsonNode v = e.getValue();
      s.append(String.format(Locale.ROOT, "%-10s round trip p50 %7.1f us p99 %7.1f | overhead p50 %7.1f us p99 %7.1f"
              + " | Server-Timing p50:", e.getKey(), v.at("/roundTripMicros/p50").asDouble(),
          v.at("/roundTripMicros/p99").asDouble(), v.at("/overheadMicros/p50").asDouble(),
          v.at("/overheadMicros/p99").asDouble()));
      v.path("serverTimingMicros").fields().forEachRemaining(t -> s.append(String.format(Locale.ROOT, " %s %.1f",
          t.getKey(), t.getValue().path("p50").asDouble())));
      if (v.has("serverMinusFunctionMicros")) {
        s.append(String.format(Locale.ROOT, " | server - function p50 %.1f p99 %.1f",
            v.at("/serverMinusFunctionMicros/p50").asDouble(), v.at("/serverMinusFunctionMicros/p99").asDouble()));
      }
      s.append(String.format(Locale.ROOT, " | GET health p50 %.1f us | first %d warm requests p50 %.1f us%n",
          v.at("/healthRoundTripMicros/p50").asDouble(), v.at("/firstWarmRoundTripMicros/count").asInt(),
          v.at("/firstWarmRoundTripMicros/p50").asDouble()));
      s.append("  threads per request (cpu us / waiting for a core us / wake-ups):");
      v.path("threadsPerRequest").fields().forEachRemaining(t -> s.append(String.format(Locale.ROOT,
          " %s %.0f/%.0f/%.2f", t.getKey(), t.getValue().path("cpuMicros").asDouble(),
          t.getValue().path("runQueueMicros").asDouble(), t.getValue().path("wakes").asDouble())));
      s.append(String.format("%n"));
    });
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (var walk = Files.walk(dir)) {
      List<Path> all = new ArrayList<>(walk.toList());
      Collections.reverse(all);
      for (Path p : all) {
        Files.deleteIfExists(p);
      }
    }
  }
}
