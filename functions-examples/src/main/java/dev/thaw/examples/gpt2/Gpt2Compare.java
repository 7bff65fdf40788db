package dev.thaw.examples.gpt2;

import static dev.thaw.examples.transformer.ReferenceCompare.JSON;
import static dev.thaw.examples.transformer.ReferenceCompare.floats;
import static dev.thaw.examples.transformer.ReferenceCompare.ints;
import static dev.thaw.examples.transformer.ReferenceCompare.ints1;
import static dev.thaw.examples.transformer.ReferenceCompare.median;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.transformer.ReferenceCompare;
import dev.thaw.examples.transformer.ReferenceCompare.Diff;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.File;
import java.util.Arrays;
import java.util.Locale;

/**
 * Checks {@link Gpt2Function} on the device against a PyTorch reference written by
 * {@code scripts/gpt2/hf_reference.py}, and measures the same warm latencies.
 *
 * <pre>
 * java -cp 'thaw/lib/*' dev.thaw.examples.gpt2.Gpt2Compare --dir DIR --reference REF.json [--out SUMMARY.json]
 *     [--runs 30] [--warmup 5] [--rel-l2 2e-2] [--tie-gap 0.05]
 * </pre>
 * DIR is the model {@code save_pretrained} wrote (config.json + model.safetensors). Checks: the prompt's
 * last-position logits (max |diff|, relative L2 against the reference, same argmax), and greedy generation
 * (same ids). A generated sequence that leaves the reference's at a step where the reference's top two logits
 * were closer than {@code --tie-gap} is reported as a near-tie, not a failure: fp16 rounding decides such a
 * step either way. Timings are medians of {@code --runs} warm invokes (each ends with the result on the
 * host). Exit code: 0 all checks pass, 1 a check failed, 2 it could not run.
 */
public final class Gpt2Compare {

  private Gpt2Compare() {}

  public static void main(String[] args) {
    ReferenceCompare.main("Gpt2Compare", Gpt2Compare::run, args);
  }

  static int run(String[] args) throws Exception {
    String dir = null;
    String reference = null;
    String out = null;
    int runs = 30;
    int warmup = 5;
    double relL2Limit = 2e-2;
    double tieGap = 0.05;
    for (int i = 0; i < args.length; i++) {
      String v = i + 1 < args.length ? args[i + 1] : null;
      switch (args[i]) {
        case "--dir" -> dir = v;
        case "--reference" -> reference = v;
        case "--out" -> out = v;
        case "--runs" -> runs = Integer.parseInt(v);
        case "--warmup" -> warmup = Integer.parseInt(v);
        case "--rel-l2" -> relL2Limit = Double.parseDouble(v);
        case "--tie-gap" -> tieGap = Double.parseDouble(v);
        default -> {
          System.err.println("unknown argument " + args[i]);
          return 2;
        }
      }
      i++;
    }
    if (dir == null || reference == null || runs < 1) {
      System.err.println("usage: Gpt2Compare --dir DIR --reference REF.json [--out SUMMARY.json] [--runs N]");
      return 2;
    }
    JsonNode ref = JSON.readTree(new File(reference));
    int[][] prompts = ints(ref.get("prompts"));
    int newTokens = ref.get("max_new_tokens").asInt();
    int longest = Arrays.stream(prompts).mapToInt(p -> p.length).max().orElse(1);

    ObjectNode summary = JSON.createObjectNode();
    boolean pass = true;
    Gpt2Function f = new Gpt2Function();
    try (GpuDriver driver = GpuDrivers.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      String device = ReferenceCompare.device(driver, ctx);
      summary.put("device", device).put("model", ref.path("model").asText());
      ObjectNode config = JSON.createObjectNode().put("path", dir).put("maxBatch", prompts.length)
          .put("maxTokens", longest + newTokens);
      long t0 = System.nanoTime();
      Gpt2Function.State state = f.init(session, config);
      double initMs = (System.nanoTime() - t0) / 1e6;
      System.out.printf(Locale.ROOT, "init (load + upload + warm-up): %.1f ms, %d layers, %d device buffers%n",
          initMs, state.config().nLayer(), session.table().allocations().size());
      summary.put("init_ms", initMs);

      // 1. The prompt's last-position logits.
      JsonNode fwd = f.invoke(session, state, FunctionRequest.of(
          Gpt2FunctionRequests.of(prompts, 1, true))).json();
      System.out.println();
      System.out.printf(Locale.ROOT, "%-28s %-4s %12s %12s %10s %s%n", "check", "seq", "max|diff|", "rel L2",
          "argmax", "verdict");
      ArrayNode checks = summary.putArray("checks");
      for (int b = 0; b < prompts.length; b++) {
        float[] expected = floats(ref.get("forward_logits").get(b));
        float[] got = floats(fwd.get("logits").get(b));
        Diff d = Diff.of(expected, got);
        boolean ok = d.relL2() <= relL2Limit && d.sameArgmax();
        pass &= ok;
        System.out.printf(Locale.ROOT, "%-28s %-4d %12.4g %12.4g %10s %s%n", "prompt logits (last pos)", b,
            d.maxAbs(), d.relL2(), d.sameArgmax() ? "same" : "DIFFERS", ok ? "PASS" : "FAIL");
        checks.addObject().put("check", "forward_logits").put("seq", b).put("max_abs", d.maxAbs())
            .put("rel_l2", d.relL2()).put("same_argmax", d.sameArgmax()).put("pass", ok);
      }

      // 2. Greedy generation.
      JsonNode gen = f.invoke(session, state, FunctionRequest.of(
          Gpt2FunctionRequests.of(prompts, newTokens, true))).json();
      for (int b = 0; b < prompts.length; b++) {
        pass &= ReferenceCompare.greedy(ref, b, newTokens, ints1(gen.get("tokens").get(b)), tieGap, checks);
      }

      // 3. Warm latency, batch 1, on the first prompt: as the reference timed it.
      int[][] one = {prompts[0]};
      double forwardMs = median(time(f, session, state, Gpt2FunctionRequests.of(one, 1, false), warmup, runs));
      double generateMs = median(time(f, session, state, Gpt2FunctionRequests.of(one, newTokens, false), warmup,
          runs));
      JsonNode hf = ref.path("timing_ms");
      System.out.println();
      System.out.printf(Locale.ROOT, "%-44s %12s %12s%n", "warm latency, batch 1, " + one[0].length
          + "-token prompt (median of " + runs + ")", "thaw ms", "pytorch ms");
      System.out.printf(Locale.ROOT, "%-44s %12.3f %12.3f%n", "forward (prompt pass + head)", forwardMs,
          hf.path("forward").path("median").asDouble(Double.NaN));
      System.out.printf(Locale.ROOT, "%-44s %12.3f %12.3f%n", "generate " + newTokens + " tokens (greedy)",
          generateMs, hf.path("generate").path("median").asDouble(Double.NaN));
      summary.putObject("timing_ms").put("forward_median", forwardMs).put("generate_median", generateMs)
          .put("runs", runs).put("warmup", warmup);
    }
    return ReferenceCompare.finish(summary, pass, out);
  }

  private static double[] time(Gpt2Function f, FunctionSession session, Gpt2Function.State state, JsonNode request,
      int warmup, int runs) {
    FunctionRequest r = FunctionRequest.of(request);
    return ReferenceCompare.time(() -> f.invoke(session, state, r), warmup, runs);
  }
}
