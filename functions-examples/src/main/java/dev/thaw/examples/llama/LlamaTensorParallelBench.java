package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.File;
import java.util.Arrays;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * Times a tensor-parallel Llama ({@link LlamaTensorParallel}) on the devices 0 .. ranks − 1 with seeded weights of a
 * named shape, generated on the host as each rank's shard is copied to its device (no file):
 * <pre>{@code
 * LlamaTensorParallelBench --shape qwen2.5-32b --ranks 2 [--rank-twin] [--layers L] [--prefill 128,2000]
 *     [--decode-steps 64] [--reps 3] [--seed 1] [--out bench.json]
 * }</pre>
 * {@code --rank-twin} times instead, at the given ranks, the model whose every split width (query and key-value
 * heads, MLP, vocabulary) is the shape's divided by {@code --ranks}, with the same layers and hidden size: one rank's
 * share as a model of its own (at 2 ranks, the model half the size). Run at {@code --ranks 1}, it is what a rank
 * would cost without the exchanges.
 *
 * <p>Clocks, per request of one sequence (median of the reps, after one warm-up request): the prefill clock starts at
 * the prompt pass's first launch, the prompt's ids already on every device, and stops when the first new id is on
 * every device (every rank's stream synchronized); the decode clock starts there and stops when the last step's id
 * is, divided by the steps. Decode is timed after the first prefill length. The load clock covers generating and
 * copying every rank's weights and allocating the caches. Prints one line per figure starting {@value #LINE}.
 */
public final class LlamaTensorParallelBench {

  static final String LINE = "TP-BENCH";

  private LlamaTensorParallelBench() {}

  public static void main(String[] args) {
    try {
      System.exit(run(args));
    } catch (Exception e) {
      System.err.println("LlamaTensorParallelBench failed: " + e);
      e.printStackTrace();
      System.exit(2);
    }
  }

  static int run(String[] args) throws Exception {
    String shapeName = null;
    int ranks = 1;
    boolean twin = false;
    int layers = 0;
    int[] prefill = {128, 2000};
    int decodeSteps = 64;
    int reps = 3;
    long seed = 1;
    String out = null;
    for (int i = 0; i < args.length; i++) {
      if (args[i].equals("--rank-twin")) {
        twin = true;
        continue;
      }
      String v = i + 1 < args.length ? args[i + 1] : null;
      if (v == null) {
        System.err.println(args[i] + " needs a value");
        return 2;
      }
      switch (args[i]) {
        case "--shape" -> shapeName = v;
        case "--ranks" -> ranks = Integer.parseInt(v);
        case "--layers" -> layers = Integer.parseInt(v);
        case "--prefill" -> prefill = Arrays.stream(v.split(",")).mapToInt(Integer::parseInt).toArray();
        case "--decode-steps" -> decodeSteps = Integer.parseInt(v);
        case "--reps" -> reps = Integer.parseInt(v);
        case "--seed" -> seed = Long.parseLong(v);
        case "--out" -> out = v;
        default -> {
          System.err.println("unknown argument " + args[i]);
          return 2;
        }
      }
      i++;
    }
    if (shapeName == null || prefill.length == 0 || decodeSteps < 1 || reps < 1) {
      System.err.println("usage: LlamaTensorParallelBench --shape NAME --ranks N [--rank-twin] [--layers L] "
          + "[--prefill 128,2000] [--decode-steps 64] [--reps 3] [--seed 1] [--out FILE]");
      return 2;
    }
    LlamaConfig shape = LlamaConfig.named(shapeName);
    if (layers > 0) {
      shape = shape.withLayers(layers);
    }
    int split = twin ? ranks : 1;
    int[] devices = new int[twin ? 1 : ranks];
    for (int r = 0; r < devices.length; r++) {
      devices[r] = r;
    }
    LlamaConfig config = twin ? rankTwin(shape, ranks) : shape;
    int longest = Arrays.stream(prefill).max().getAsInt();
    int maxTokens = Math.max(longest + 1, prefill[0] + decodeSteps + 1);
    ObjectNode doc = JsonNodeFactory.instance.objectNode();
    try (GpuDriver driver = GpuDrivers.open()) {
      String label = config.name() + (twin ? " (one rank's share of " + shape.name() + " at " + split + ")" : "");
      System.out.printf(Locale.ROOT, "%s model=%s ranks=%d layers=%d hidden=%d heads=%d kv_heads=%d "
          + "intermediate=%d vocab=%d params=%.2fe9 device=%s (%s)%n", LINE, config.name(), devices.length,
          config.layers(), config.hiddenSize(), config.heads(), config.kvHeads(), config.intermediateSize(),
          config.vocabSize(), config.parameterCount() / 1e9, driver.devices().get(0).name(), driver.name());
      long loadStart = System.nanoTime();
      try (LlamaTensorParallel tp = LlamaTensorParallel.open(driver, devices, new SeededLlamaWeights(config, seed),
          1, maxTokens)) {
        double loadS = (System.nanoTime() - loadStart) / 1e9;
        System.out.printf(Locale.ROOT, "%s model=%s ranks=%d load_s=%.1f device_gb_per_rank=%.1f (clock: open, "
            + "weights generated on the host and copied to every rank, caches allocated)%n", LINE, config.name(),
            devices.length, loadS, tp.deviceBytes(0) / 1e9);
        doc.put("model", config.name());
        doc.put("label", label);
        doc.put("ranks", devices.length);
        doc.put("params", config.parameterCount());
        doc.put("load_s", loadS);
        SplittableRandom random = new SplittableRandom(seed);
        tp.generate(new int[][] {prompt(random, 16, config.vocabSize())}, 4);
        ArrayNode results = doc.putArray("prefill");
        double decodeMs = Double.NaN;
        for (int i = 0; i < prefill.length; i++) {
          int steps = i == 0 ? decodeSteps + 1 : 1;
          double[] pre = new double[reps];
          double[] dec = new double[reps];
          for (int r = 0; r < reps; r++) {
            LlamaTensorParallel.Result res = tp.generate(new int[][] {prompt(random, prefill[i], config.vocabSize())},
                steps);
            pre[r] = res.prefillMs();
            dec[r] = res.decodeMs() / Math.max(1, steps - 1);
          }
          double prefillMs = median(pre);
          System.out.printf(Locale.ROOT, "%s model=%s ranks=%d prefill_tokens=%d prefill_ms=%.2f "
              + "(clock: first launch of the prompt pass to its first id on every device; median of %d, each "
              + "run: %s)%n", LINE, config.name(), devices.length, prefill[i], prefillMs, reps, fmt(pre));
          ObjectNode p = results.addObject();
          p.put("tokens", prefill[i]);
          p.put("ms", prefillMs);
          if (i == 0) {
            decodeMs = median(dec);
            System.out.printf(Locale.ROOT, "%s model=%s ranks=%d decode_ms_per_token=%.3f context=%d steps=%d "
                + "(clock: after the first id, until the last step's id on every device, per step; median of %d, "
                + "each run: %s)%n", LINE, config.name(), devices.length, decodeMs, prefill[0], decodeSteps, reps,
                fmt(dec));
          }
        }
        doc.put("decode_ms_per_token", decodeMs);
        doc.put("decode_context", prefill[0]);
      }
    }
    if (out != null) {
      new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(new File(out), doc);
    }
    return 0;
  }

  /**
   * One rank's share of {@code c} at {@code ranks} as a model of its own: query and key-value heads, MLP width and
   * vocabulary divided by ranks; the layers, head size and hidden size kept (the residual stream every rank holds
   * whole). Its products are exactly one rank's; what it lacks is the exchanges.
   */
  static LlamaConfig rankTwin(LlamaConfig c, int ranks) {
    LlamaShard.check(c, ranks);
    return new LlamaConfig(c.name() + "-rank-of-" + ranks, c.architecture(), c.hiddenSize(), c.layers(),
        c.heads() / ranks, c.kvHeads() / ranks, c.headDim(), c.intermediateSize() / ranks, c.vocabSize() / ranks,
        c.maxPositions(), c.rmsNormEps(), c.ropeTheta(), c.ropeScaling(), c.tieEmbeddings(), c.qkvBias(),
        c.slidingWindow(), c.type()).validate();
  }

  private static int[] prompt(SplittableRandom random, int length, int vocab) {
    int[] p = new int[length];
    for (int i = 0; i < length; i++) {
      p[i] = random.nextInt(vocab);
    }
    return p;
  }

  private static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  }

  private static String fmt(double[] v) {
    StringBuilder b = new StringBuilder();
    for (double d : v) {
      b.append(b.length() == 0 ? "" : " ").append(String.format(Locale.ROOT, "%.3f", d));
    }
    return b.toString();
  }
}
