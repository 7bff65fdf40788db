package dev.thaw.examples.transformer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * What the GPT-2 and Llama compare tools share: reading a reference file's arrays, comparing logits, the greedy
 * generation check and its lines, warm timing loops, and the tool's start and end (device line, {@code RESULT:}
 * line, summary file, exit code). The GPU scripts parse these lines, so both tools print them from here.
 */
public final class ReferenceCompare {

  public static final ObjectMapper JSON = new ObjectMapper();

  private ReferenceCompare() {}

  /** What a compare tool's body is: the exit code, or an exception (exit code 2). */
  @FunctionalInterface
  public interface Tool {
    int run(String[] args) throws Exception;
  }

  /** Runs {@code tool} as a {@code main}: exits with its code, or 2 with the stack trace when it throws. */
  public static void main(String name, Tool tool, String[] args) {
    try {
      System.exit(tool.run(args));
    } catch (Exception e) {
      System.err.println(name + " failed: " + e);
      e.printStackTrace();
      System.exit(2);
    }
  }

  /** The device line ({@code device: ...}), printed; the value it names, for the summary. */
  public static String device(GpuDriver driver, GpuContext ctx) {
    String device = driver.name() + " / " + ctx.device().name() + (driver.isSimulated()
        ? " (SIMULATED: timings are not GPU timings)" : "");
    System.out.println("device: " + device);
    return device;
  }

  /**
   * Greedy generation of sequence {@code b} against the reference's {@code generated[b]}: identical ids pass, and
   * so does a sequence that leaves the reference's at a step whose reference top-1/top-2 gap
   * ({@code generate_step_gaps[b]}) is below {@code tieGap} (a near-tie: rounding decides such a step either way).
   * Prints the verdict and both sequences, adds the check to {@code checks}, and says whether it passed.
   */
  public static boolean greedy(JsonNode ref, int b, int newTokens, int[] got, double tieGap, ArrayNode checks) {
    int[] expected = ints1(ref.get("generated").get(b));
    int diverge = -1;
    for (int i = 0; i < Math.max(expected.length, got.length); i++) {
      if (i >= expected.length || i >= got.length || expected[i] != got[i]) {
        diverge = i;
        break;
      }
    }
    String verdict;
    boolean ok;
    if (diverge < 0) {
      ok = true;
      verdict = "PASS (" + got.length + "/" + expected.length + " ids identical)";
    } else {
      JsonNode gaps = ref.path("generate_step_gaps").path(b);
      double gap = gaps.has(diverge) ? gaps.get(diverge).asDouble() : Double.NaN;
      ok = gap < tieGap;
      verdict = (ok ? "PASS near-tie" : "FAIL") + String.format(Locale.ROOT,
          " (first difference at step %d: ref %d, got %d; ref top-2 gap there %.4g)", diverge,
          diverge < expected.length ? expected[diverge] : -1, diverge < got.length ? got[diverge] : -1, gap);
    }
    System.out.printf(Locale.ROOT, "%-28s %-4d %s%n", "greedy " + newTokens + " tokens", b, verdict);
    System.out.println("    reference: " + Arrays.toString(expected));
    System.out.println("    thaw:      " + Arrays.toString(got));
    checks.addObject().put("check", "greedy_tokens").put("seq", b).put("first_difference", diverge)
        .put("pass", ok).put("verdict", verdict);
    return ok;
  }

  /** Ends a compare: the {@code RESULT:} line, the summary (with {@code pass}) to {@code out} if any; the exit code. */
  public static int finish(ObjectNode summary, boolean pass, String out) throws IOException {
    summary.put("pass", pass);
    System.out.println();
    System.out.println(pass ? "RESULT: PASS" : "RESULT: FAIL");
    if (out != null) {
      JSON.writerWithDefaultPrettyPrinter().writeValue(new File(out), summary);
    }
    return pass ? 0 : 1;
  }

  /** Warm timings in ms of {@code invoke}: {@code warmup} unmeasured calls, then {@code runs} measured ones. */
  public static double[] time(Runnable invoke, int warmup, int runs) {
    for (int i = 0; i < warmup; i++) {
      invoke.run();
    }
    double[] ms = new double[runs];
    for (int i = 0; i < runs; i++) {
      long t0 = System.nanoTime();
      invoke.run();
      ms[i] = (System.nanoTime() - t0) / 1e6;
    }
    return ms;
  }

  public static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    int n = s.length;
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
  }

  /** How far {@code got} is from {@code expected}. */
  public record Diff(double maxAbs, double relL2, boolean sameArgmax) {
    public static Diff of(float[] expected, float[] got) {
      if (expected.length != got.length) {
        return new Diff(Double.POSITIVE_INFINITY, Double.POSITIVE_INFINITY, false);
      }
      double max = 0;
      double num = 0;
      double den = 0;
      for (int i = 0; i < expected.length; i++) {
        double d = (double) got[i] - expected[i];
        max = Math.max(max, Math.abs(d));
        num += d * d;
        den += (double) expected[i] * expected[i];
      }
      double rel = den == 0 ? (num == 0 ? 0 : Double.POSITIVE_INFINITY) : Math.sqrt(num / den);
      if (Double.isNaN(max)) {
        return new Diff(Double.NaN, Double.NaN, false);
      }
      return new Diff(max, rel, ArgmaxSim.argmax(expected, expected.length) == ArgmaxSim.argmax(got, got.length));
    }
  }

  public static int[][] ints(JsonNode rows) {
    List<int[]> out = new ArrayList<>();
    for (JsonNode r : rows) {
      out.add(ints1(r));
    }
    return out.toArray(new int[0][]);
  }

  public static int[] ints1(JsonNode r) {
    int[] v = new int[r.size()];
    for (int i = 0; i < v.length; i++) {
      v[i] = r.get(i).asInt();
    }
    return v;
  }

  public static float[] floats(JsonNode r) {
    float[] v = new float[r.size()];
    for (int i = 0; i < v.length; i++) {
      v[i] = (float) r.get(i).asDouble();
    }
    return v;
  }
}
