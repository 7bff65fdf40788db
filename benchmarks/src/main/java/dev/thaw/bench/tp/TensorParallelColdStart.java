package dev.thaw.bench.tp;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.SeededLlamaWeights;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.restore.GroupRestorer;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.PinnedImageSource;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.File;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The cold start of a tensor-parallel Llama from its group image, on the devices 0 .. ranks − 1, with seeded weights
 * of a named shape (generated on the host as each rank's shard is copied to its device: never a file):
 * <pre>{@code
 * TensorParallelColdStart --shape qwen2.5-32b --ranks 2 --store DIR [--phase all|build|cold] [--layers L]
 *     [--rounds 5] [--prompt 16] [--max-tokens 256 or the shape's context] [--seed 1] [--no-profile] [--out FILE]
 * }</pre>
 * {@code --phase build} builds and exits; {@code --phase cold} (another JVM: a cold start's process is new) reads the
 * group from the store, its prompt and expected ids from the sample recorded in rank 0's image, and runs the rest;
 * {@code all} (the default) runs both in one JVM, the build released first.
 * <ol>
 *   <li><b>build</b>: the split model recorded one session per rank ({@link LlamaTensorParallel#record}), one sample
 *   request (the prompt, 2 new ids) profiled on every rank, every rank snapshotted into the store at once. Clock: from
 *   the record call until the group is committed.</li>
 *   <li><b>host cache</b>: everything of the build released; each rank's image read from the store into pinned memory
 *   of its own GPU's context ({@link PinnedImageSource}, as the pool's host cache holds an image), and each rank's
 *   {@link RestoreResources} made: what a warm pool worker holds before a request arrives, outside the clock.</li>
 *   <li><b>rounds</b>: per round, every rank prepared ahead (its modules loaded, as a pool worker does while idle:
 *   {@code prepare_ms}, outside the clock); then from the group restore call ({@link GroupRestorer}: every rank
 *   mapped and streaming from the host through its own GPU's link at once) until the greedy id of the prompt is on
 *   every GPU
 *   ({@code first_id_ms}: the cold time to first token), and when each rank's last byte landed (by the events after
 *   its copies); then the same request again on the resident group ({@code warm_ms}), and the ids checked equal to
 *   the build's.</li>
 * </ol>
 * Prints one line per figure starting {@value #LINE}; {@code --out} writes them as JSON.
 */
public final class TensorParallelColdStart {

  static final String LINE = "TP-COLD";

  private TensorParallelColdStart() {}

  public static void main(String[] args) {
    try {
      System.exit(run(args));
    } catch (Exception e) {
      System.err.println("TensorParallelColdStart failed: " + e);
      e.printStackTrace();
      System.exit(2);
    }
  }

  public static int run(String[] args) throws Exception {
    try (GpuDriver driver = GpuDrivers.open()) {
      return run(args, driver);
    }
  }

  static int run(String[] args, GpuDriver driver) throws Exception {
    String shapeName = null;
    String phase = "all";
    String storeDir = null;
    String out = null;
    int ranks = 2;
    int layers = 0;
    int rounds = 5;
    int promptLength = 16;
    int maxTokens = 0;
    long seed = 1;
    boolean profile = true;
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--no-profile")) {
        profile = false;
        continue;
      }
      String v = i + 1 < args.length ? args[i + 1] : null;
      if (v == null) {
        System.err.println(args[i] + " needs a value");
        return 2;
      }
      switch (args[i]) {
        case "--shape" -> shapeName = v;
        case "--phase" -> phase = v;
        case "--ranks" -> ranks = Integer.parseInt(v);
        case "--store" -> storeDir = v;
        case "--layers" -> layers = Integer.parseInt(v);
        case "--rounds" -> rounds = Integer.parseInt(v);
        case "--prompt" -> promptLength = Integer.parseInt(v);
        case "--max-tokens" -> maxTokens = Integer.parseInt(v);
        case "--seed" -> seed = Long.parseLong(v);
        case "--out" -> out = v;
        default -> {
          System.err.println("unknown argument " + args[i]);
          return 2;
        }
      }
      i++;
    }
    boolean build = phase.equals("all") || phase.equals("build");
    boolean coldPhase = phase.equals("all") || phase.equals("cold");
    if (shapeName == null || storeDir == null || ranks < 2 || rounds < 1 || promptLength < 1
        || (maxTokens != 0 && maxTokens < promptLength + 2) || !(build || coldPhase)) {
      System.err.println("usage: TensorParallelColdStart --shape NAME --ranks N (2-4) --store DIR "
          + "[--phase all|build|cold] [--layers L] [--rounds 5] [--prompt 16] [--max-tokens 256 (> prompt + 1)] "
          + "[--seed 1] [--no-profile] [--out FILE]");
      return 2;
    }
    LlamaConfig config = LlamaConfig.named(shapeName);
    if (layers > 0) {
      config = config.withLayers(layers);
    }
    if (maxTokens == 0) {
      maxTokens = Math.min(256, config.maxPositions());
    }
    int[] devices = new int[ranks];
    for (int r = 0; r < ranks; r++) {
      devices[r] = r;
    }
    SplittableRandom random = new SplittableRandom(seed);
    int[][] prompt = {new int[promptLength]};
    for (int i = 0; i < promptLength; i++) {
      prompt[0][i] = random.nextInt(config.vocabSize());
    }
    String tag = "tp-" + config.name().replaceAll("[^a-z0-9.-]", "-") + "-l" + config.layers() + "-" + ranks;
    ObjectNode doc = JsonNodeFactory.instance.objectNode();
    doc.put("model", config.name());
    doc.put("ranks", ranks);
    doc.put("params", config.parameterCount());
    doc.put("prompt", promptLength);
    try (RocksChunkStore store = RocksChunkStore.open(Path.of(storeDir))) {
      System.out.printf(Locale.ROOT, "%s model=%s ranks=%d layers=%d params=%.2fe9 device=%s (%s) store=%s "
          + "phase=%s%n", LINE, config.name(), ranks, config.layers(), config.parameterCount() / 1e9,
          driver.devices().get(0).name(), driver.name(), storeDir, phase);
      if (build) {
        build(driver, store, config, devices, seed, maxTokens, prompt, profile, tag, doc);
      }
      if (coldPhase) {
        if (!cold(driver, store, config, devices, rounds, tag, doc)) {
          write(out, doc);
          return 1;
        }
      }
    }
    write(out, doc);
    return 0;
  }

  private static void write(String out, ObjectNode doc) throws Exception {
    if (out != null) {
      new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(new File(out), doc);
    }
  }

  /** Builds the group image of the seeded model into the store and frees every rank's session. */
  private static void build(GpuDriver driver, RocksChunkStore store, LlamaConfig config, int[] devices, long seed,
      int maxTokens, int[][] prompt, boolean profile, String tag, ObjectNode doc) throws Exception {
    int ranks = devices.length;
    long t = System.nanoTime();
    TensorParallelImages.Built built = TensorParallelImages.build(driver, devices,
        new SeededLlamaWeights(config, seed), 1, maxTokens, prompt, 2, profile, store, new FastCdcChunker(), tag,
        new BuildOptions(), ProgressListener.NONE);
    double buildS = (System.nanoTime() - t) / 1e9;
    long bytes = built.result().totalBytes();
    double snapshotS = built.result().millis() / 1e3;
    System.out.printf(Locale.ROOT, "%s build model=%s ranks=%d build_s=%.1f snapshot_s=%.1f image_gb=%.2f "
        + "snapshot_gb_per_s=%.2f profiled=%b (clock: record call to the group committed; snapshot: every rank's "
        + "snapshot and commit)%n", LINE, config.name(), ranks, buildS, snapshotS, bytes / 1e9,
        bytes / 1e9 / snapshotS, profile);
    doc.put("build_s", buildS);
    doc.put("snapshot_s", snapshotS);
    doc.put("image_bytes", bytes);
    doc.put("tag", tag);
    // The sample request and the group's answer, as a server serving the group takes and gives them.
    ImageManifest.Sample sample = TensorParallelImages.sample(prompt, 2, built.sample().tokens());
    doc.set("sample_request", sample.request());
    doc.set("sample_response", sample.response());
  }

  /**
   * The cold starts of the group tagged {@code tag}: its prompt and expected ids are the sample recorded in rank 0's
   * image. False when a round's ids differ from the build's.
   */
  private static boolean cold(GpuDriver driver, RocksChunkStore store, LlamaConfig config, int[] devices, int rounds,
      String tag, ObjectNode doc) throws Exception {
    int ranks = devices.length;
    GroupImage.Stored stored = GroupImage.read(store, tag);
    long bytes = stored.ranks().stream().mapToLong(ImageManifest::totalBytes).sum();
    ImageManifest.Sample sample = stored.ranks().get(0).samples().get(0);
    int[][] prompt = {ids(sample.request().get("tokens").get(0))};
    int[] expected = ids(sample.response().get("tokens").get(0));
    doc.put("image_bytes", bytes);
    long t;
    List<RestorePlan> plans = stored.ranks().stream().map(RestorePlan::of).toList();
    List<GpuContext> contexts = new ArrayList<>();
    List<RestoreResources> resources = new ArrayList<>();
    List<PinnedImageSource> sources = new ArrayList<>();
    try {
      for (int d : devices) {
        contexts.add(driver.createContext(d));
      }
      t = System.nanoTime();
      ExecutorService loaders = Executors.newFixedThreadPool(ranks);
      try {
        List<Future<PinnedImageSource>> loading = new ArrayList<>();
        int threads = Math.max(2, Runtime.getRuntime().availableProcessors() / ranks);
        for (int r = 0; r < ranks; r++) {
          RestorePlan plan = plans.get(r);
          GpuContext ctx = contexts.get(r);
          loading.add(loaders.submit(() -> PinnedImageSource.load(plan, store, ctx, threads)));
        }
        for (Future<PinnedImageSource> f : loading) {
          sources.add(f.get());
        }
      } finally {
        loaders.shutdown();
      }
      double cacheS = (System.nanoTime() - t) / 1e9;
      for (GpuContext ctx : contexts) {
        resources.add(RestoreResources.create(ctx));
      }
      System.out.printf(Locale.ROOT, "%s host-cache model=%s ranks=%d load_s=%.1f pinned_gb=%.2f (clock: every "
          + "rank's image read from the store into pinned memory at once, verified)%n", LINE, config.name(), ranks,
          cacheS, sources.stream().mapToLong(PinnedImageSource::bytes).sum() / 1e9);
      doc.put("host_cache_s", cacheS);
      List<GroupRestorer.Target> targets = new ArrayList<>();
      for (int r = 0; r < ranks; r++) {
        targets.add(new GroupRestorer.Target(contexts.get(r), sources.get(r), resources.get(r)));
      }
      GroupRestorer restorer = new GroupRestorer(store);
      ArrayNode all = doc.putArray("rounds");
      double[] first = new double[rounds];
      double[] landed = new double[rounds];
      double[] warm = new double[rounds];
      boolean match = true;
      double[] prepare = new double[rounds];
      for (int i = 0; i < rounds; i++) {
        // What a pool worker does for an image while it is idle: the ranks' modules loaded, outside the clock.
        long p = System.nanoTime();
        List<PreparedRestore> prepared = restorer.prepare(plans, targets);
        prepare[i] = (System.nanoTime() - p) / 1e6;
        long start = System.nanoTime();
        double readyMs;
        double firstMs;
        double[] lastByte = new double[ranks];
        LlamaTensorParallel.Result cold;
        LlamaTensorParallel.Result again;
        double warmMs;
        try (TensorParallelImages.Cold group = TensorParallelImages.startPrepared(restorer, prepared, targets,
            new OnDemandOptions())) {
          readyMs = (System.nanoTime() - start) / 1e6;
          cold = group.model().generate(prompt, 1);
          firstMs = (System.nanoTime() - start) / 1e6;
          group.restore().awaitResident();
          for (int r = 0; r < ranks; r++) {
            OnDemandRestore rr = group.restore().ranks().get(r);
            lastByte[r] = (rr.residentNanos() - start) / 1e6;
          }
          long w = System.nanoTime();
          again = group.model().generate(prompt, 1);
          warmMs = (System.nanoTime() - w) / 1e6;
        }
        boolean same = cold.tokens()[0][0] == expected[0] && again.tokens()[0][0] == expected[0];
        match &= same;
        first[i] = firstMs;
        landed[i] = Arrays.stream(lastByte).max().getAsDouble();
        warm[i] = warmMs;
        System.out.printf(Locale.ROOT, "%s round=%d model=%s ranks=%d prepare_ms=%.1f ready_ms=%.1f "
            + "first_id_ms=%.1f last_byte_ms=%s warm_ms=%.2f ids=%s (clock: group restore call, the ranks' modules "
            + "loaded ahead (prepare_ms), to the first id on every GPU; last byte per rank by its copies' events; "
            + "warm: the same request on the resident group)%n", LINE, i, config.name(), ranks, prepare[i], readyMs,
            firstMs, fmt(lastByte), warmMs, same ? "match" : "DIFFER");
        ObjectNode o = all.addObject();
        o.put("prepare_ms", prepare[i]);
        o.put("ready_ms", readyMs);
        o.put("first_id_ms", firstMs);
        ArrayNode lb = o.putArray("last_byte_ms");
        Arrays.stream(lastByte).forEach(lb::add);
        o.put("warm_ms", warmMs);
        o.put("ids_match", same);
      }
      double floorS = bytes / 125e9;
      System.out.printf(Locale.ROOT, "%s summary model=%s ranks=%d first_id_ms=%.1f last_byte_ms=%.1f "
          + "warm_ms=%.2f image_gb=%.2f ids=%s (medians of %d rounds; %.0f ms moves the image at 125 GB/s)%n",
          LINE, config.name(), ranks, median(first), median(landed), median(warm), bytes / 1e9,
          match ? "match" : "DIFFER", rounds, floorS * 1e3);
      doc.put("first_id_ms", median(first));
      doc.put("last_byte_ms", median(landed));
      doc.put("warm_ms", median(warm));
      doc.put("ids_match", match);
      return match;
    } finally {
      resources.forEach(RestoreResources::close);
      sources.forEach(PinnedImageSource::close);
      contexts.forEach(GpuContext::close);
    }
  }

  private static int[] ids(JsonNode row) {
    int[] out = new int[row.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = row.get(i).asInt();
    }
    return out;
  }

  private static String fmt(double[] v) {
    StringBuilder b = new StringBuilder();
    for (double x : v) {
      b.append(b.length() == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.1f", x));
    }
    return b.toString();
  }

  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  }
}
