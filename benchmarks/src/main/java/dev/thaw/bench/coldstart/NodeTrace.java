package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code thaw-bench node-trace}: one {@code thaw serve} with many registered functions under an open-loop trace of
 * Zipf popularity and bursty arrivals ({@link ArrivalTrace}), once per tier policy, the same trace each time. Per
 * policy it reports, per tier the cold starts began from, their share and time to first response (p50, p99), warm
 * requests, errors (a non-200 or an answer other than the image's own), hit rates, bytes moved per request,
 * evictions and memory held; and, before the trace, single-function probes of each tier against the same probes on a
 * server that serves one function only. Writes {@code node-trace.json} and {@code node-trace.md} into {@code --out}.
 */
@Command(name = "node-trace", mixinStandardHelpOptions = true, sortOptions = false,
    description = {
        "Many functions on one thaw serve, an open-loop trace (Zipf popularity, bursty arrivals), once per tier",
        "policy: recency (the default), registration (the policy-free baseline), off (no host cache, no HBM",
        "tier) and no-recycle (recency, every worker one image in its life: --recycle-limit 0). Reports per tier the cold-start share and time to first response, warm latency, errors, hit rates,",
        "bytes moved per request, evictions and memory held. On the simulated device every figure is SIMULATED.",
        ""})
public final class NodeTrace implements Callable<Integer> {

  static final String JSON_FILE = "node-trace.json";
  static final String REPORT_FILE = "node-trace.md";
  private static final String TOKEN = "node-trace-admin";

  @Option(names = "--model", description = "Function of each image: mlp or gpt2 (GPT-2 small, seeded weights).")
  String model = "mlp";

  @Option(names = "--images", description = "Images of different weights, sharing nothing (default: ${DEFAULT-VALUE}).")
  int images = 20;

  @Option(names = "--variants", description = "More images sharing the first images' weights, another serving "
      + "configuration each: the store deduplicates them (default: ${DEFAULT-VALUE}).")
  int variants = 5;

  @Option(names = "--functions", description = "Functions registered, over the images in turn (default: ${DEFAULT-VALUE}).")
  int functions = 100;

  @Option(names = "--seconds", description = "Length of the trace (default: ${DEFAULT-VALUE}).")
  double seconds = 60;

  @Option(names = "--rate", description = "Requests per second in the calm state (default: ${DEFAULT-VALUE}).")
  double rate = 4;

  @Option(names = "--zipf", description = "Zipf exponent of popularity (default: ${DEFAULT-VALUE}).")
  double zipf = 1.0;

  @Option(names = "--burst-factor", description = "Rate in a burst over the calm rate (default: ${DEFAULT-VALUE}).")
  double burstFactor = 5;

  @Option(names = "--calm-seconds", description = "Mean length of a calm stretch (default: ${DEFAULT-VALUE}).")
  double calmSeconds = 8;

  @Option(names = "--burst-seconds", description = "Mean length of a burst (default: ${DEFAULT-VALUE}).")
  double burstSeconds = 2;

  @Option(names = "--keep-alive", description = "Each function's keepAlive (default: ${DEFAULT-VALUE}).")
  String keepAlive = "3s";

  @Option(names = "--host-cache", description = "thaw serve --host-cache (default: ${DEFAULT-VALUE}).")
  String hostCache = "256m";

  @Option(names = "--hbm-tier", description = "thaw serve --hbm-tier (default: ${DEFAULT-VALUE}).")
  String hbmTier = "64m";

  @Option(names = "--idle-workers", description = "thaw serve --idle-workers (default: ${DEFAULT-VALUE}).")
  int idleWorkers = 2;

  @Option(names = "--max-workers", description = "thaw serve --max-workers (default: ${DEFAULT-VALUE}).")
  int maxWorkers = 8;

  @Option(names = "--max-starting", description = "thaw serve --max-starting (default: the server's).")
  Integer maxStarting;

  @Option(names = "--recycle-limit", description = "thaw serve --recycle-limit for every policy but no-recycle "
      + "(default: the server's).")
  Integer recycleLimit;

  @Option(names = "--policies", split = ",", description = "Policies to run (default: ${DEFAULT-VALUE}).")
  List<String> policies = List.of("recency", "registration", "off");

  @Option(names = "--probes", description = "Single-function probes per tier (default: ${DEFAULT-VALUE}).")
  int probes = 4;

  @Option(names = "--device", description = "THAW_DEVICE: auto, cuda or sim (default: ${DEFAULT-VALUE}).")
  String device = "auto";

  @Option(names = "--seed", description = "The trace's seed (default: ${DEFAULT-VALUE}).")
  long seed = 21;

  @Option(names = "--out", required = true, description = "Where node-trace.json and node-trace.md go.")
  Path out;

  @Option(names = "--work", description = "Where the image store goes (default: a temporary folder).")
  Path work;

  @Option(names = "--from", paramLabel = "JSON", description = "Draw the report and its plots again from a run's "
      + "node-trace.json (where a JDK with AWT is: the tarball's runtime has none), into --out; runs nothing.")
  Path from;

  private final PrintStream log;

  NodeTrace(PrintStream log) {
    this.log = log;
  }

  public static void main(String[] args) {
    System.exit(new CommandLine(new NodeTrace(System.out)).execute(args));
  }

  /** One image of the node: its tag, the request it is probed and traced with, and the answer it must give. */
  record Image(String tag, byte[] request, JsonNode expected) {}

  @Override
  public Integer call() throws Exception {
    if (from != null) {
      JsonNode r = ColdStartResult.JSON.readTree(from.toFile());
      Files.createDirectories(out);
      List<String> plots = NodeTracePlots.render(r, out.resolve("node-trace"));
      Files.writeString(out.resolve(REPORT_FILE), NodeTraceReport.markdown(r) + "\n" + String.join("\n\n", plots)
          + "\n", StandardCharsets.UTF_8);
      return 0;
    }
    if (images < 1 || variants < 0 || functions < 1 || probes < 0) {
      throw new CommandLine.ParameterException(new CommandLine(this), "images and functions ≥ 1, variants and probes "
          + "≥ 0");
    }
    Files.createDirectories(out);
    Path workDir = work != null ? Files.createDirectories(work) : Files.createTempDirectory("thaw-node-trace-");
    Path store = workDir.resolve("store");
    ObjectNode result = ColdStartResult.JSON.createObjectNode();
    result.put("startedAt", Instant.now().toString());
    long t0 = System.nanoTime();
    List<Image> built;
    boolean simulated;
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.parse(device))) {
      simulated = driver.isSimulated();
      result.put("device", driver.name() + ": " + driver.devices().get(0).name());
      built = build(driver, store);
    }
    result.put("simulated", simulated);
    result.put("buildSeconds", (System.nanoTime() - t0) / 1e9);
    result.put("storeBytes", folderBytes(store));
    ObjectNode setup = result.putObject("setup");
    setup.put("model", model).put("images", images).put("variants", variants).put("functions", functions)
        .put("keepAlive", keepAlive).put("hostCache", hostCache).put("hbmTier", hbmTier)
        .put("idleWorkers", idleWorkers).put("maxWorkers", maxWorkers)
        .put("maxStarting", maxStarting == null ? "the server's default" : maxStarting.toString());
    ArrivalTrace trace = ArrivalTrace.generate(functions, zipf, rate, burstFactor, calmSeconds, burstSeconds,
        seconds, seed);
    ObjectNode t = result.putObject("trace");
    t.put("requests", trace.arrivals().size()).put("distinctFunctions", trace.distinctFunctions()).put("zipf", zipf)
        .put("rate", rate).put("burstFactor", burstFactor).put("calmSeconds", calmSeconds)
        .put("burstSeconds", burstSeconds).put("seconds", seconds).put("seed", seed);
    log.printf(Locale.ROOT, "node-trace: %d images built in %.1f s (%s); trace: %d requests to %d of %d functions%n",
        built.size(), (System.nanoTime() - t0) / 1e9, simulated ? "SIMULATED" : "GPU", trace.arrivals().size(),
        trace.distinctFunctions(), functions);
    ThawCommand thaw = ThawCommand.locate(device, store);
    result.put("thaw", thaw.describe());
    ObjectNode single = result.putObject("singleFunction");
    probeSingle(thaw, built, single);
    ObjectNode runs = result.putObject("policies");
    boolean ok = true;
    for (String policy : policies) {
      ObjectNode r = runs.putObject(policy);
      try {
        ok &= runPolicy(thaw, policy, built, trace, r);
      } catch (IOException e) {
        r.put("failed", e.getMessage());
        log.println("node-trace: policy " + policy + " failed: " + e.getMessage());
        ok = false;
      }
      ColdStartResult.JSON.writerWithDefaultPrettyPrinter().writeValue(out.resolve(JSON_FILE).toFile(), result);
    }
    Files.writeString(out.resolve(REPORT_FILE), NodeTraceReport.markdown(result), StandardCharsets.UTF_8);
    log.println(NodeTraceReport.markdown(result));
    return ok ? 0 : 1;
  }

  /** Builds the images into the store; variants share their base's weights (another serving configuration). */
  private List<Image> build(GpuDriver driver, Path store) throws Exception {
    List<Image> out = new ArrayList<>();
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store))) {
      for (int i = 0; i < images + variants; i++) {
        int base = i < images ? i : (i - images) % images;
        String tag = "node-" + model + ":" + i;
        String config = config(base, i >= images ? 1 + (i - images) / images : 0);
        JsonNode request = ColdStartResult.JSON.readTree(request(base));
        if (s.manifest(tag).isEmpty()) {
          try (GpuContext ctx = driver.createContext(0)) {
            new ImageBuilder(s, new FastCdcChunker()).build(new BuildOptions().setFunctionClass(functionClass())
                .setConfig(config).setTag(tag).addSampleRequest(request), ctx, ProgressListener.NONE);
          }
        }
        JsonNode expected = Images.manifest(s, tag).samples().get(0).response();
        out.add(new Image(tag, ColdStartResult.JSON.writeValueAsBytes(request), expected));
      }
    }
    return out;
  }

  private String functionClass() {
    return model.equals("gpt2") ? "dev.thaw.examples.gpt2.Gpt2Function" : "dev.thaw.examples.mlp.MlpFunction";
  }

  /** A distinct seed per base image; a variant changes only what is not weights (batch, cache length). */
  private String config(int base, int variant) {
    if (model.equals("gpt2")) {
      return "{\"model\": \"gpt2\", \"seed\": " + (100 + base) + ", \"maxBatch\": 1, \"maxTokens\": "
          + (64 + 16 * variant) + "}";
    }
    if (model.equals("mlp")) {
      return "{\"layers\": [64, 512, 64], \"seed\": " + (100 + base) + ", \"maxBatch\": " + (4 + variant) + "}";
    }
    throw new IllegalArgumentException("--model is mlp or gpt2, not '" + model + "'");
  }

  private String request(int base) {
    if (model.equals("gpt2")) {
      return "{\"tokens\": [[464, 2068, 7586, " + (21831 + base) + "]], \"maxNewTokens\": 1}";
    }
    StringBuilder b = new StringBuilder("{\"inputs\": [[");
    for (int i = 0; i < 64; i++) {
      b.append(i == 0 ? "" : ", ").append((i * 7 + base) % 11 / 10.0);
    }
    return b.append("]]}").toString();
  }

  private List<String> serveOptions(String policy) {
    boolean off = policy.equals("off");
    boolean noRecycle = policy.equals("no-recycle");
    List<String> o = new ArrayList<>(List.of("--idle-workers", Integer.toString(idleWorkers), "--max-workers",
        Integer.toString(maxWorkers), "--host-cache", off ? "0" : hostCache, "--hbm-tier", off ? "0" : hbmTier,
        "--tier-policy", off || noRecycle ? "recency" : policy));
    if (maxStarting != null) {
      o.addAll(List.of("--max-starting", Integer.toString(maxStarting)));
    }
    if (noRecycle || recycleLimit != null) {
      o.addAll(List.of("--recycle-limit", noRecycle ? "0" : Integer.toString(recycleLimit)));
    }
    return o;
  }

  /**
   * The tiers' figures with one function registered: for {@code probes} images, the first cold start (from the host
   * cache: the image was staged at registration) and, once it scaled to zero, the second (from the HBM tier).
   */
  private void probeSingle(ThawCommand thaw, List<Image> built, ObjectNode into) throws Exception {
    try (NodeServer server = NodeServer.start(thaw, serveOptions("recency"), TOKEN, Duration.ofMinutes(3))) {
      for (int i = 0; i < Math.min(probes, built.size()); i++) {
        String name = "single" + i;
        server.register(name, built.get(i).tag(), keepAlive);
      }
      probe(server, built, "single", into);
    }
  }

  /** Two cold starts of each probe function, scaled to zero in between; samples by tier. */
  private void probe(NodeServer server, List<Image> built, String prefix, ObjectNode into) throws Exception {
    Map<String, List<Double>> byTier = new LinkedHashMap<>();
    Duration wait = Duration.ofMinutes(2);
    for (int i = 0; i < Math.min(probes, built.size()); i++) {
      String name = prefix + i;
      for (int round = 0; round < 2; round++) {
        server.awaitIdleWorkers(idleWorkers, wait);
        // The staging and prepares of a registration (or the last scale-in's hand-off) settle first.
        Thread.sleep(500);
        NodeServer.Answer a = server.invoke(name, built.get(i).request()).get();
        if (a.status() == 200 && a.start().equals("cold")) {
          byTier.computeIfAbsent(a.tier(), k -> new ArrayList<>()).add(a.millis());
        } else {
          into.withArray("errors").add(name + ": " + a.status() + " " + a.start() + " " + Lines.abbreviate(a.body()));
        }
        server.awaitScaledToZero(name, wait);
      }
    }
    ObjectNode tiers = into.putObject("coldByTier");
    byTier.forEach((tier, ms) -> tiers.set(tier, stats(ms)));
  }

  private boolean runPolicy(ThawCommand thaw, String policy, List<Image> built, ArrivalTrace trace,
      ObjectNode into) throws Exception {
    log.println("node-trace: policy " + policy);
    try (NodeServer server = NodeServer.start(thaw, serveOptions(policy), TOKEN, Duration.ofMinutes(3))) {
      long r0 = System.nanoTime();
      for (int f = 0; f < functions; f++) {
        server.register("f" + f, built.get(f % built.size()).tag(), keepAlive);
      }
      into.put("registerMillis", (System.nanoTime() - r0) / 1e6);
      long l0 = System.nanoTime();
      server.get("/v1/functions");
      into.put("listMillis", (System.nanoTime() - l0) / 1e6);
      // The same probes as on the one-function server, now among every registered function.
      for (int i = 0; i < Math.min(probes, built.size()); i++) {
        server.register("probe" + i, built.get(i).tag(), keepAlive);
      }
      probe(server, built, "probe", into.putObject("probes"));
      server.awaitIdleWorkers(idleWorkers, Duration.ofMinutes(2));
      Map<String, Double> before = server.metrics();
      List<NodeServer.Answer> answers = play(server, trace, built);
      Map<String, Double> after = server.metrics();
      into.put("metricsLines", after.size());
      return summarize(trace, built, answers, before, after, into);
    }
  }

  /** Sends every arrival at its time (open loop: nothing waits for an answer) and collects the answers in order. */
  private List<NodeServer.Answer> play(NodeServer server, ArrivalTrace trace, List<Image> built) throws Exception {
    ScheduledExecutorService clock = Executors.newSingleThreadScheduledExecutor();
    List<CompletableFuture<NodeServer.Answer>> sent = new ArrayList<>();
    try {
      long start = System.nanoTime() + 200_000_000L;
      for (ArrivalTrace.Arrival a : trace.arrivals()) {
        CompletableFuture<NodeServer.Answer> f = new CompletableFuture<>();
        sent.add(f);
        long delay = start + (long) (a.at() * 1e9) - System.nanoTime();
        Image image = built.get(a.function() % built.size());
        clock.schedule(() -> server.invoke("f" + a.function(), image.request()).whenComplete((r, e) -> f.complete(r)),
            Math.max(0, delay), TimeUnit.NANOSECONDS);
      }
      List<NodeServer.Answer> answers = new ArrayList<>();
      for (CompletableFuture<NodeServer.Answer> f : sent) {
        answers.add(f.get(5, TimeUnit.MINUTES));
      }
      return answers;
    } finally {
      clock.shutdownNow();
    }
  }

  private boolean summarize(ArrivalTrace trace, List<Image> built, List<NodeServer.Answer> answers,
      Map<String, Double> before, Map<String, Double> after, ObjectNode into) throws IOException {
    Map<String, List<Double>> cold = new LinkedHashMap<>();
    List<Double> warm = new ArrayList<>();
    int errors = 0;
    ArrayNode errorSamples = into.putArray("errorSamples");
    for (int i = 0; i < answers.size(); i++) {
      NodeServer.Answer a = answers.get(i);
      Image image = built.get(trace.arrivals().get(i).function() % built.size());
      boolean right = a.status() == 200 && ColdStartResult.JSON.readTree(a.body()).equals(image.expected());
      if (!right) {
        errors++;
        if (errorSamples.size() < 10) {
          errorSamples.add("f" + trace.arrivals().get(i).function() + ": " + a.status() + " "
              + Lines.abbreviate(a.body()));
        }
        continue;
      }
      if (a.start().equals("cold")) {
        cold.computeIfAbsent(a.tier().isEmpty() ? "unknown" : a.tier(), k -> new ArrayList<>()).add(a.millis());
      } else {
        warm.add(a.millis());
      }
    }
    int colds = cold.values().stream().mapToInt(List::size).sum();
    into.put("requests", answers.size()).put("errors", errors).put("coldStarts", colds);
    ObjectNode tiers = into.putObject("coldByTier");
    cold.forEach((tier, ms) -> tiers.set(tier, stats(ms).put("shareOfCold", colds == 0 ? 0 : ms.size() / (double) colds)));
    into.set("warm", stats(warm));
    double hbm = cold.getOrDefault("hbm", List.of()).size();
    double cache = cold.getOrDefault("host-cache", List.of()).size();
    into.put("hbmHitRate", colds == 0 ? 0 : hbm / colds);
    into.put("hostCacheHitRate", colds == 0 ? 0 : (hbm + cache) / colds);
    double moved = delta(before, after, "thaw_restore_bytes_total", "tier=\"host-cache\"")
        + delta(before, after, "thaw_restore_bytes_total", "tier=\"store\"");
    double staged = delta(before, after, "thaw_host_cache_staged_bytes_total");
    into.put("bytesMovedPerRequest", answers.isEmpty() ? 0 : moved / answers.size());
    into.put("storeBytesReadPerRequest", answers.isEmpty() ? 0
        : (staged + delta(before, after, "thaw_restore_bytes_total", "tier=\"store\"")) / answers.size());
    ObjectNode ev = into.putObject("evictions");
    for (String reason : List.of("keep_alive", "memory", "unhealthy", "lost")) {
      ev.put(reason, delta(before, after, "thaw_evictions_total", "reason=\"" + reason + "\""));
    }
    ev.put("hostCacheBytes", delta(before, after, "thaw_host_cache_evicted_bytes_total"));
    into.put("recycles", delta(before, after, "thaw_pool_recycles_total"));
    ObjectNode held = into.putObject("heldAtEnd");
    held.put("hostCacheBytes", NodeServer.sum(after, "thaw_host_cache_bytes", "state=\"used\""));
    held.put("hbmTierBytes", NodeServer.sum(after, "thaw_hbm_tier_bytes"));
    return errors == 0;
  }

  private static double delta(Map<String, Double> before, Map<String, Double> after, String name, String... labels) {
    return NodeServer.sum(after, name, labels) - NodeServer.sum(before, name, labels);
  }

  /** Count, median ({@code p50}), nearest-rank p99, min and max of {@code ms}. */
  static ObjectNode stats(List<Double> ms) {
    ObjectNode o = ColdStartResult.JSON.createObjectNode();
    double[] sorted = ms.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    o.put("n", sorted.length);
    if (sorted.length > 0) {
      o.put("p50", median(sorted)).put("p99", percentile(sorted, 0.99)).put("min", sorted[0])
          .put("max", sorted[sorted.length - 1]);
      ArrayNode all = o.putArray("samples");
      Arrays.stream(sorted).forEach(all::add);
    }
    return o;
  }

  /** The median of sorted samples (the mean of the middle two for an even count). */
  static double median(double[] sorted) {
    int n = sorted.length;
    return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }

  /** The nearest-rank percentile of sorted samples. */
  static double percentile(double[] sorted, double q) {
    int rank = (int) Math.ceil(q * sorted.length);
    return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
  }

  private static long folderBytes(Path dir) throws IOException {
    try (var files = Files.walk(dir)) {
      return files.filter(Files::isRegularFile).mapToLong(p -> p.toFile().length()).sum();
    }
  }
}
