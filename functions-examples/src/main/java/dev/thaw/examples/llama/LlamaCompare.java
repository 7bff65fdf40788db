package dev.thaw.examples.llama;

import static dev.thaw.examples.transformer.ArgmaxSim.argmax;
import static dev.thaw.examples.transformer.ReferenceCompare.JSON;
import static dev.thaw.examples.transformer.ReferenceCompare.floats;
import static dev.thaw.examples.transformer.ReferenceCompare.ints;
import static dev.thaw.examples.transformer.ReferenceCompare.ints1;
import static dev.thaw.examples.transformer.ReferenceCompare.median;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;
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
import java.util.Random;

/**
 * Checks {@link LlamaFunction} on the device against a transformers reference written by
 * {@code scripts/llama/hf_reference.py}, and optionally measures warm decode and prefill.
 *
 * <pre>
 * java -cp 'thaw/lib/*' dev.thaw.examples.llama.LlamaCompare --dir DIR --reference REF.json [--out SUMMARY.json]
 *     [--rel-l2 5e-2] [--tie-gap 0.1] [--decode-tokens 0] [--decode-contexts C,...] [--prefill L,...] [--runs 5]
 * </pre>
 * DIR is the model {@code save_pretrained} wrote. Checks: the prompts' last-position logits (relative L2 against
 * the reference within {@code --rel-l2}, or, where the reference also has the fp32 model's logits, within 3 ×
 * {@code --rel-l2} of those and at least as close as transformers' bf16 ones (+10%); and the same argmax or one
 * the reference scores within {@code --tie-gap} of its own) and greedy generation (same ids; a sequence that
 * leaves the reference's at a step whose reference top-1/top-2 gap is below {@code --tie-gap} is a near-tie, not
 * a failure: bf16 rounding decides such a step either way).
 * {@code --decode-tokens N}: warm decode time per token at batch 1, from (generate 1 + N) − (generate 1) after a
 * prompt of each {@code --decode-contexts} length (default: the first reference prompt), median of
 * {@code --runs}. {@code --prefill L,...}: a warm L-token prompt pass with its head and one token, for each L (the
 * whole forward, as scripts/llama/hf_bench.py times PyTorch's on the same folder). Prompts for timing are seeded
 * random ids. Exit code: 0 all checks pass, 1 a check failed, 2 it could not run.
 */
public final class LlamaCompare {

  private LlamaCompare() {}

  public static void main(String[] args) {
    ReferenceCompare.main("LlamaCompare", LlamaCompare::run, args);
  }

  static int run(String[] args) throws Exception {
    String dir = null;
    String reference = null;
    String out = null;
    int runs = 5;
    int decodeTokens = 0;
    int[] decodeContexts = null;
    int[] prefill = {};
    double relL2Limit = 5e-2;
    double tieGap = 0.1;
    try {
      for (int i = 0; i < args.length; i++) {
        String v = i + 1 < args.length ? args[i + 1] : null;
        switch (args[i]) {
          case "--dir" -> dir = v;
          case "--reference" -> reference = v;
          case "--out" -> out = v;
          case "--runs" -> runs = Integer.parseInt(v);
          case "--decode-tokens" -> decodeTokens = Integer.parseInt(v);
          case "--decode-contexts" -> decodeContexts = positiveInts("--decode-contexts", v);
          case "--prefill" -> prefill = positiveInts("--prefill", v);
          case "--rel-l2" -> relL2Limit = Double.parseDouble(v);
          case "--tie-gap" -> tieGap = Double.parseDouble(v);
          default -> {
            System.err.println("unknown argument " + args[i]);
            return 2;
          }
        }
        i++;
      }
    } catch (IllegalArgumentException e) {  // NumberFormatException included
      System.err.println("bad argument: " + e.getMessage());
      return 2;
    }
    if (dir == null || reference == null || runs < 1 || decodeTokens < 0) {
      System.err.println("usage: LlamaCompare --dir DIR --reference REF.json [--out SUMMARY.json] "
          + "[--decode-tokens N] [--decode-contexts C,...] [--prefill L,...] [--runs N]");
      return 2;
    }
    JsonNode ref = JSON.readTree(new File(reference));
    int[][] prompts = ints(ref.get("prompts"));
    int newTokens = ref.get("max_new_tokens").asInt();
    int longest = Arrays.stream(prompts).mapToInt(p -> p.length).max().orElse(1);
    if (decodeContexts == null) {
      decodeContexts = new int[] {prompts[0].length};
    }
    int maxTokens = Math.max(longest + Math.max(newTokens, decodeTokens + 1),
        Arrays.stream(prefill).max().orElse(0) + 1);
    if (decodeTokens > 0) {
      maxTokens = Math.max(maxTokens, Arrays.stream(decodeContexts).max().orElse(0) + decodeTokens + 1);
    }

    ObjectNode summary = JSON.createObjectNode();
    boolean pass = true;
    LlamaFunction f = new LlamaFunction();
    try (GpuDriver driver = GpuDrivers.open(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      String device = ReferenceCompare.device(driver, ctx);
      summary.put("device", device).put("model", ref.path("model").asText());
      ObjectNode config = JSON.createObjectNode().put("path", dir).put("maxBatch", prompts.length)
          .put("maxTokens", maxTokens);
      long t0 = System.nanoTime();
      LlamaFunction.State state = f.init(session, config);
      double initMs = (System.nanoTime() - t0) / 1e6;
      LlamaConfig c = state.config();
      System.out.printf(Locale.ROOT, "init (load + upload + warm-up): %.1f ms; %s %s, %d layers, C=%d, heads %d/%d, "
          + "D=%d, I=%d, V=%d, %.2fB parameters%n", initMs, c.architecture().className(), c.type().torchName(),
          c.layers(), c.hiddenSize(), c.heads(), c.kvHeads(), c.headDim(), c.intermediateSize(), c.vocabSize(),
          c.parameterCount() / 1e9);
      summary.put("init_ms", initMs).put("layers", c.layers()).put("parameters", c.parameterCount());

      // 1. The prompts' last-position logits.
      JsonNode fwd = f.invoke(session, state, FunctionRequest.of(TokenRequest.body(prompts, 0, true))).json();
      System.out.println();
      JsonNode fp32 = ref.get("forward_logits_fp32");
      System.out.printf(Locale.ROOT, "%-28s %-4s %12s %12s %14s %14s %10s %s%n", "check", "seq", "max|diff|",
          "rel L2", "thaw vs fp32", "hf vs fp32", "argmax", "verdict");
      ArrayNode checks = summary.putArray("checks");
      for (int b = 0; b < prompts.length; b++) {
        float[] expected = floats(ref.get("forward_logits").get(b));
        float[] got = floats(fwd.get("logits").get(b));
        Diff d = Diff.of(expected, got);
        // A different argmax passes only as a near-tie: the reference scores ours within tieGap of its own.
        double argmaxGap = d.sameArgmax() ? 0 : expected[argmax(expected, expected.length)]
            - expected[argmax(got, got.length)];
        // Against the fp32 truth, when the reference has it: Thaw may differ from transformers' bf16 logits by more
        // than relL2Limit only by being at least as close to fp32 as they are (within 10%), and within 3 x relL2Limit.
        double thaw32 = Double.NaN;
        double hf32 = Double.NaN;
        if (fp32 != null && fp32.has(b)) {
          float[] truth = floats(fp32.get(b));
          thaw32 = Diff.of(truth, got).relL2();
          hf32 = Diff.of(truth, expected).relL2();
        }
        boolean close = d.relL2() <= relL2Limit || (thaw32 <= 1.1 * hf32 && thaw32 <= 3 * relL2Limit);
        boolean ok = close && argmaxGap < tieGap;
        pass &= ok;
        String verdict = !ok ? "FAIL" : d.relL2() > relL2Limit ? "PASS (closer to fp32 than transformers)"
            : d.sameArgmax() ? "PASS" : "PASS near-tie";
        System.out.printf(Locale.ROOT, "%-28s %-4d %12.4g %12.4g %14.4g %14.4g %10s %s%n",
            "prompt logits (last pos)", b, d.maxAbs(), d.relL2(), thaw32, hf32, d.sameArgmax() ? "same"
                : String.format(Locale.ROOT, "gap %.3g", argmaxGap), verdict);
        ObjectNode check = checks.addObject().put("check", "forward_logits").put("seq", b).put("max_abs", d.maxAbs())
            .put("rel_l2", d.relL2()).put("same_argmax", d.sameArgmax()).put("argmax_gap", argmaxGap)
            .put("pass", ok);
        if (!Double.isNaN(thaw32)) {
          check.put("thaw_rel_l2_vs_fp32", thaw32).put("hf_rel_l2_vs_fp32", hf32);
        }
      }

      // 2. Greedy generation.
      JsonNode gen = f.invoke(session, state, FunctionRequest.of(TokenRequest.body(prompts, newTokens, false)))
          .json();
      for (int b = 0; b < prompts.length; b++) {
        pass &= ReferenceCompare.greedy(ref, b, newTokens, ints1(gen.get("tokens").get(b)), tieGap, checks);
      }

      // 3. Warm speed, batch 1: the whole forward by prompt length, decode per token by context.
      ObjectNode timing = summary.putObject("timing_ms");
      JsonNode hf = ref.path("timing_ms");
      Random ids = new Random(11);
      if (prefill.length > 0) {
        System.out.println();
        System.out.printf(Locale.ROOT, "prefill, batch 1: an L-token prompt pass + head + 1 token (median of %d)%n",
            runs);
        ObjectNode byLength = timing.putObject("prefill_ms_by_tokens");
        for (int L : prefill) {
          int[][] p = {ids.ints(L, 0, c.vocabSize()).toArray()};
          double ms = median(time(f, session, state, TokenRequest.body(p, 1, false), runs));
          System.out.printf(Locale.ROOT, "  %6d tokens  thaw %9.2f ms  (%.0f tokens/s)%n", L, ms, L / ms * 1e3);
          byLength.put(Integer.toString(L), ms);
        }
        if (prefill.length == 1) {
          double hfMs = hf.path("prefill_ms").asDouble(Double.NaN);
          System.out.printf(Locale.ROOT, "  transformers eager forward at %d tokens (reference): %.2f ms%n",
              prefill[0], hfMs);
          timing.put("prefill_tokens", prefill[0]).put("prefill_ms", byLength.get(Integer.toString(prefill[0]))
              .asDouble()).put("hf_prefill_ms", hfMs);
        }
      }
      if (decodeTokens > 0) {
        System.out.println();
        System.out.printf(Locale.ROOT, "decode, batch 1: (generate 1 + %d) - (generate 1) after a C-token prompt, "
            + "per token (median of %d)%n", decodeTokens, runs);
        ObjectNode byContext = timing.putObject("decode_ms_per_token_by_context");
        for (int C : decodeContexts) {
          int[][] p = C == prompts[0].length ? new int[][] {prompts[0]} : new int[][] {ids.ints(C, 0,
              c.vocabSize()).toArray()};
          double base = median(time(f, session, state, TokenRequest.body(p, 1, false), runs));
          double full = median(time(f, session, state, TokenRequest.body(p, 1 + decodeTokens, false),
              runs));
          double perToken = (full - base) / decodeTokens;
          System.out.printf(Locale.ROOT, "  context %6d  thaw %7.3f ms/token%n", C, perToken);
          byContext.put(Integer.toString(C), perToken);
          if (C == decodeContexts[0]) {
            double hfPerToken = hf.path("decode_ms_per_token").asDouble(Double.NaN);
            timing.put("decode_ms_per_token", perToken).put("hf_decode_ms_per_token", hfPerToken)
                .put("decode_tokens", decodeTokens).put("generate_1_ms", base);
            if (!Double.isNaN(hfPerToken)) {
              System.out.printf(Locale.ROOT, "  transformers eager (reference, context %d): %.3f ms/token "
                  + "(thaw %.2fx faster)%n", prompts[0].length, hfPerToken, hfPerToken / perToken);
            }
          }
        }
      }
      timing.put("runs", runs);
    }
    return ReferenceCompare.finish(summary, pass, out);
  }

  private static int[] positiveInts(String flag, String csv) {
    int[] v = Arrays.stream(csv.split(",")).map(String::trim).filter(x -> !x.isEmpty()).mapToInt(Integer::parseInt)
        .toArray();
    if (v.length == 0 || Arrays.stream(v).anyMatch(x -> x <= 0)) {
      throw new IllegalArgumentException(flag + " takes positive integers, comma-separated: " + csv);
    }
    return v;
  }

  /** Warm timings of one request: two unmeasured invokes, then {@code runs} measured ones. */
  private static double[] time(LlamaFunction f, FunctionSession session, LlamaFunction.State state, JsonNode request,
      int runs) {
    FunctionRequest r = FunctionRequest.of(request);
    return ReferenceCompare.time(() -> f.invoke(session, state, r), 2, runs);
  }
}
