package dev.thaw.bench.restore;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PinnedImageSource;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;

/**
 * Cold invoke from host memory, three strategies side by side in one process on one context: <b>full</b> (restore
 * every byte, then run), <b>on-demand</b> (run at once, launches gated on residency) and <b>warm</b> (the function
 * already restored). Builds GPT-2-large ({@code {"model": "gpt2-large", "seed": 1, "maxBatch": 1, "maxTokens":
 * 64}}) and the MLP into a store (reused when the tags are there), loads each image into a {@link PinnedImageSource}
 * and restores from it; 16-token prompt → 1 token and → 16 tokens. Reports the medians of the timed rounds and writes
 * a Chrome trace of one on-demand GPT-2-large cold start.
 *
 * <p>Run: {@code java -cp <lib/*> dev.thaw.bench.restore.OnDemandBenchmark <store dir> <out dir> [rounds]
 * [gpt2 model]}. {@code THAW_DEVICE} picks the device; on the sim device the numbers are not GPU numbers.
 */
public final class OnDemandBenchmark {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int[] PROMPT = {15718, 20896, 46414, 19723, 24521, 404, 19748, 16241, 3185, 40007, 45275,
      21281, 39983, 5076, 24913, 29307};

  private record Case(String image, String label, JsonNode request) {}

  /** How a round restores: {@code full} waits for residency before invoking; {@code warm} invokes a restored one. */
  private record Strategy(String name, boolean full, boolean warm, boolean reversed, long window,
      OnDemandOptions.Promotion promotion) {

    OnDemandOptions options() {
      return new OnDemandOptions().setWindowBytes(window).setPromotion(promotion);
    }
  }

  private static final long ALL = Long.MAX_VALUE;
  private static final long WINDOW = OnDemandOptions.DEFAULT_WINDOW_BYTES;
  private static final OnDemandOptions.Promotion REORDER = OnDemandOptions.Promotion.REORDER;
  private static final List<Strategy> STRATEGIES = List.of(
      new Strategy("full", true, false, false, ALL, REORDER),
      new Strategy("on-demand", false, false, false, WINDOW, REORDER),
      new Strategy("on-demand, all queued at once", false, false, false, ALL, REORDER),
      new Strategy("warm", false, true, false, WINDOW, REORDER));
  /** With the profile's order reversed (a stale profile): what moving a needed allocation to the head buys. */
  private static final List<Strategy> REVERSED = List.of(
      new Strategy("reversed order: all queued at once", false, false, true, ALL, REORDER),
      new Strategy("reversed order: reorder, 64 MiB window", false, false, true, WINDOW, REORDER),
      new Strategy("reversed order: reorder, 8 MiB window", false, false, true, 8L << 20, REORDER),
      new Strategy("reversed order: second stream", false, false, true, WINDOW,
          OnDemandOptions.Promotion.SECOND_STREAM));

  public static void main(String[] args) throws Exception {
    Path storeDir = Path.of(args.length > 0 ? args[0] : Files.createTempDirectory("thaw-ondemand").toString());
    Path out = Path.of(args.length > 1 ? args[1] : ".");
    int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 7;
    String model = args.length > 3 ? args[3] : "gpt2-large";
    Files.createDirectories(out);
    // The test configs (tiny, tiny-wide: for the sim device) have vocabularies of 97 ids or more.
    String prompt = Arrays.toString(model.startsWith("tiny") ? Arrays.stream(PROMPT).map(t -> t % 97).toArray()
        : PROMPT);
    ObjectNode results = JSON.createObjectNode();
    ArrayNode rows = results.putArray("rows");
    try (GpuDriver driver = GpuDrivers.open(DeviceChoice.fromEnvironment());
        GpuContext ctx = driver.createContext(0);
        RocksChunkStore store = RocksChunkStore.open(storeDir)) {
      results.put("device", ctx.device().name());
      System.out.println("device: " + ctx.device().name() + " (" + driver.name() + ")");
      String gpt2 = "gpt2-bench";
      build(store, ctx, gpt2, "dev.thaw.examples.gpt2.Gpt2Function",
          "{\"model\": \"" + model + "\", \"seed\": 1, \"maxBatch\": 1, \"maxTokens\": 64}",
          "{\"tokens\": [" + prompt + "], \"maxNewTokens\": 16}");
      build(store, ctx, "mlp-bench", "dev.thaw.examples.mlp.MlpFunction", "{}", mlpRequest());
      List<Case> cases = List.of(
          new Case(gpt2, model + ", 16 → 1 token", JSON.readTree("{\"tokens\": [" + prompt + "], \"maxNewTokens\": 1}")),
          new Case(gpt2, model + ", 16 → 16 tokens",
              JSON.readTree("{\"tokens\": [" + prompt + "], \"maxNewTokens\": 16}")),
          new Case("mlp-bench", "mlp (64-256-256-10), 1 row", JSON.readTree(mlpRequest())));
      System.out.println("| case | strategy | first kernel ms | ready ms | first response ms | resident ms "
          + "| hidden ms | promotions | waits |");
      System.out.println("|---|---|---|---|---|---|---|---|---|");
      try (RestoreResources resources = RestoreResources.create(ctx)) {
        String loaded = null;
        PinnedImageSource cache = null;
        RestorePlan plan = null;
        try {
          for (Case c : cases) {
            if (!c.image().equals(loaded)) {
              if (cache != null) {
                cache.close();
              }
              ImageManifest manifest = Images.manifest(store, c.image());
              plan = RestorePlan.of(manifest);
              long t = System.nanoTime();
              cache = PinnedImageSource.load(plan, store, ctx, 16);
              System.out.printf(Locale.ROOT, "host cache of %s: %.1f MB in %.0f ms (%s order, %s)%n", c.image(),
                  cache.bytes() / 1e6, (System.nanoTime() - t) / 1e6, plan.orderSource(),
                  manifest.profile().summary());
              loaded = c.image();
            }
            List<Strategy> strategies = new ArrayList<>(STRATEGIES);
            if (c == cases.get(0)) {
              strategies.addAll(REVERSED);
            }
            for (Strategy strategy : strategies) {
              RestorePlan p = strategy.reversed() ? RestorePlan.of(reversed(plan.manifest())) : plan;
              rows.add(measure(c, strategy, p, store, ctx, cache, resources, rounds));
            }
          }
          // One traced on-demand cold start of the first case, after the timed rounds.
          Case first = cases.get(0);
          ImageManifest manifest = Images.manifest(store, first.image());
          plan = RestorePlan.of(manifest);
          if (!first.image().equals(loaded)) {
            cache.close();
            cache = PinnedImageSource.load(plan, store, ctx, 16);
          }
          trace(first, plan, store, ctx, cache, resources, out.resolve("ondemand-trace.json"));
        } finally {
          if (cache != null) {
            cache.close();
          }
        }
      }
    }
    JSON.writerWithDefaultPrettyPrinter().writeValue(out.resolve("ondemand-results.json").toFile(), results);
  }

  private static String mlpRequest() {
    StringBuilder b = new StringBuilder("{\"inputs\": [[");
    for (int i = 0; i < 64; i++) {
      b.append(i == 0 ? "" : ", ").append(String.format(Locale.ROOT, "%.3f", Math.sin(i)));
    }
    return b.append("]]}").toString();
  }

  private static void build(RocksChunkStore store, GpuContext ctx, String tag, String function, String config,
      String sample) throws Exception {
    if (store.manifest(tag).isPresent()) {
      return;
    }
    long t = System.nanoTime();
    BuildOptions o = new BuildOptions().setFunctionClass(function).setConfig(config).setTag(tag)
        .addSampleRequest(JSON.readTree(sample));
    new ImageBuilder(store, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE);
    System.out.printf(Locale.ROOT, "built %s in %.1f s%n", tag, (System.nanoTime() - t) / 1e9);
  }

  /** One strategy's rounds; the first two warm the JVM's code paths (a pooled worker has them warm) and are dropped. */
  private static ObjectNode measure(Case c, Strategy strategy, RestorePlan plan, RocksChunkStore store,
      GpuContext ctx, PinnedImageSource cache, RestoreResources resources, int rounds) throws Exception {
    OnDemandRestorer restorer = new OnDemandRestorer(store);
    FunctionRequest request = FunctionRequest.of(c.request());
    int n = rounds + 2;
    double[] firstKernel = new double[n];
    double[] ready = new double[n];
    double[] response = new double[n];
    double[] resident = new double[n];
    double[] hidden = new double[n];
    double[] map = new double[n];
    double[] modules = new double[n];
    double[] state = new double[n];
    double[] copies = new double[n];
    long promotions = 0;
    long waits = 0;
    JsonNode answer = null;
    for (int i = 0; i < n; i++) {
      OnDemandOptions options = strategy.options();
      if (strategy.warm()) {
        try (OnDemandRestore r = restorer.restore(plan, ctx, cache, resources, options)) {
          r.function().invoke(request);
          r.awaitResident();
          long t0 = System.nanoTime();
          answer = r.function().invoke(request).json();
          response[i] = (System.nanoTime() - t0) / 1e6;
        }
        continue;
      }
      long t0 = System.nanoTime();
      try (OnDemandRestore r = restorer.restore(plan, ctx, cache, resources, options)) {
        ready[i] = (System.nanoTime() - t0) / 1e6;
        map[i] = r.timings().mapMillis();
        modules[i] = r.timings().modulesMillis();
        state[i] = r.timings().stateMillis();
        if (strategy.full()) {
          r.awaitResident();
        }
        answer = r.function().invoke(request).json();
        long t1 = System.nanoTime();
        response[i] = (t1 - t0) / 1e6;
        firstKernel[i] = (r.trace().firstLaunchNanos() - t0) / 1e6;
        r.awaitResident();
        resident[i] = (r.residentNanos() - t0) / 1e6;
        // Kernel time hidden behind copies: what running after full residency would have added, minus what it did.
        long warm0 = System.nanoTime();
        r.function().invoke(request);
        double warm = (System.nanoTime() - warm0) / 1e6;
        hidden[i] = resident[i] + warm - response[i];
        OnDemandRestore.Stats s = r.stats();
        promotions = s.promotions();
        copies[i] = s.copies();
        waits = s.waits() + s.fullWaits();
      }
    }
    ObjectNode row = JSON.createObjectNode();
    row.put("case", c.label());
    row.put("strategy", strategy.name());
    row.put("firstKernelMs", median(firstKernel));
    row.put("readyMs", median(ready));
    row.put("firstResponseMs", median(response));
    row.put("residentMs", median(resident));
    row.put("hiddenMs", median(hidden));
    row.put("mapMs", median(map));
    row.put("modulesMs", median(modules));
    row.put("stateMs", median(state));
    row.put("copies", median(copies));
    row.put("promotions", promotions);
    row.put("waits", waits);
    row.set("response", answer);
    boolean warm = strategy.warm();
    System.out.printf(Locale.ROOT, "| %s | %s | %s | %s | %.2f | %s | %s | %d | %d |%n", c.label(), strategy.name(),
        warm ? "-" : fmt(median(firstKernel)), warm ? "-" : fmt(median(ready)), median(response),
        warm ? "-" : fmt(median(resident)), warm ? "-" : fmt(median(hidden)), promotions, waits);
    if (!warm) {
      System.out.printf(Locale.ROOT, "|   | ready = map %.2f + modules %.2f + host state %.2f ms (+ start); %.0f copies | "
          + "| | | | | | |%n", median(map), median(modules), median(state), median(copies));
    }
    return row;
  }

  private static void trace(Case c, RestorePlan plan, RocksChunkStore store, GpuContext ctx, PinnedImageSource cache,
      RestoreResources resources, Path file) throws Exception {
    OnDemandRestorer restorer = new OnDemandRestorer(store);
    FunctionRequest request = FunctionRequest.of(c.request());
    try (OnDemandRestore r = restorer.restore(plan, ctx, cache, resources, new OnDemandOptions().setTrace(true))) {
      r.trace().instant("request: function invocable");
      r.function().invoke(request);
      r.trace().instant("response");
      r.awaitResident();
      r.trace().writeChromeTrace(file);
      System.out.println("trace of one on-demand cold start (" + c.label() + "): " + file);
    }
  }

  private static ImageManifest reversed(ImageManifest m) {
    List<String> order = new ArrayList<>(m.profile().firstAccessOrder());
    Collections.reverse(order);
    return m.withProfile(new ImageManifest.Profile(m.profile().orderSource(), m.profile().launches(), order,
        m.profile().kernels()));
  }

  private static String fmt(double v) {
    return String.format(Locale.ROOT, "%.2f", v);
  }

  /** The median of the timed rounds (the first two dropped). */
  private static double median(double[] all) {
    double[] v = Arrays.copyOfRange(all, 2, all.length);
    Arrays.sort(v);
    return v.length == 0 ? Double.NaN : v[v.length / 2];
  }
}
