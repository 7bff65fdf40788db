package dev.thaw.examples.transformer;

import static org.junit.jupiter.api.Assertions.fail;

import java.util.List;

/**
 * One tensor a kernel case produces (the GPT-2 and Llama kernel tests' cases alike): compared exactly (bits), or
 * within {@code rtol*|e| + atolRms*rms(e)} plus, where the arithmetic of one kernel bounds an error of its own
 * beyond that, {@code allowance[i]} (null: none).
 */
public record KernelOutput(String name, float[] values, int width, boolean exact, double rtol, double atolRms,
    double[] allowance) {

  public KernelOutput(String name, float[] values, int width, boolean exact, double rtol, double atolRms) {
    this(name, values, width, exact, rtol, atolRms, null);
  }

  /** This output with a per-value allowance added to its tolerance. */
  public KernelOutput withAllowance(double[] extra) {
    if (extra.length != values.length) {
      throw new IllegalArgumentException(extra.length + " allowances for " + values.length + " values");
    }
    return new KernelOutput(name, values, width, exact, rtol, atolRms, extra);
  }

  public static KernelOutput exact(String name, float[] values, int width) {
    return new KernelOutput(name, values, width, true, 0, 0);
  }

  public static KernelOutput exact(String name, int[] values, int width) {
    float[] f = new float[values.length];
    for (int i = 0; i < f.length; i++) {
      f[i] = values[i];
    }
    return exact(name, f, width);
  }

  /** fp32 outputs: sums in another order. */
  public static KernelOutput fp32(String name, float[] values, int width) {
    return new KernelOutput(name, values, width, false, 1e-4, 1e-4);
  }

  public static KernelOutput fp32(String name, double[] values, int width) {
    return fp32(name, floats(values), width);
  }

  public static float[] floats(double[] a) {
    float[] f = new float[a.length];
    for (int i = 0; i < a.length; i++) {
      f[i] = (float) a[i];
    }
    return f;
  }

  /**
   * Compares outputs; returns null when they agree, else a message naming the case, the tensor, the first
   * bad indices (with row and column), expected vs got, and how many are bad.
   */
  public static String compare(String caseName, String expectedFrom, List<KernelOutput> expected, String gotFrom,
      List<KernelOutput> got) {
    if (expected.size() != got.size()) {
      return caseName + ": " + expected.size() + " outputs vs " + got.size();
    }
    StringBuilder report = new StringBuilder();
    for (int o = 0; o < expected.size(); o++) {
      KernelOutput e = expected.get(o);
      KernelOutput g = got.get(o);
      if (e.values.length != g.values.length) {
        report.append(String.format("%s %s: %d values expected, got %d%n", caseName, e.name, e.values.length,
            g.values.length));
        continue;
      }
      double rms = 0;
      for (float v : e.values) {
        rms += (double) v * v;
      }
      rms = Math.sqrt(rms / Math.max(1, e.values.length));
      double atol = e.atolRms * rms;
      int bad = 0;
      double worst = 0;
      StringBuilder first = new StringBuilder();
      for (int i = 0; i < e.values.length; i++) {
        float ev = e.values[i];
        float gv = g.values[i];
        boolean ok;
        double err = Math.abs((double) gv - ev);
        if (e.exact) {
          ok = Float.floatToIntBits(ev) == Float.floatToIntBits(gv);
        } else {
          ok = !Double.isNaN(err) && err <= allowed(e, i, atol);
        }
        if (!ok) {
          if (bad < 5) {
            first.append(String.format("  [%d] (row %d, col %d): %s %s, %s %s (|diff| %.3g, allowed %.3g)%n", i,
                i / e.width, i % e.width, expectedFrom, ev, gotFrom, gv, err, allowed(e, i, atol)));
          }
          bad++;
          worst = Math.max(worst, Double.isNaN(err) ? Double.POSITIVE_INFINITY : err);
        }
      }
      if (bad > 0) {
        report.append(String.format("%s, output %s: %d of %d values differ (worst |diff| %.3g, %s):%n%s", caseName,
            e.name, bad, e.values.length, worst, e.exact ? "exact expected" : String.format(
                "allowed %.0e*|%s| + %.0e*rms(%s) = %.3g%s", e.rtol, expectedFrom, e.atolRms, expectedFrom, atol,
                e.allowance != null ? " + the per-value allowance" : ""),
            first));
      }
    }
    return report.length() == 0 ? null : report.toString();
  }

  /** Fails on the first value of {@code got} whose bits differ from {@code expected}'s (plain vs instrumented). */
  public static void assertSameBits(String caseName, List<KernelOutput> expected, List<KernelOutput> got) {
    for (int o = 0; o < expected.size(); o++) {
      float[] e = expected.get(o).values();
      float[] g = got.get(o).values();
      for (int i = 0; i < e.length; i++) {
        if (Float.floatToRawIntBits(e[i]) != Float.floatToRawIntBits(g[i])) {
          fail(String.format("%s, output %s [%d]: plain %s, instrumented %s", caseName, expected.get(o).name(), i,
              e[i], g[i]));
        }
      }
    }
  }

  private static double allowed(KernelOutput e, int i, double atol) {
    return e.rtol * Math.abs(e.values[i]) + atol + (e.allowance != null ? e.allowance[i] : 0);
  }
}
