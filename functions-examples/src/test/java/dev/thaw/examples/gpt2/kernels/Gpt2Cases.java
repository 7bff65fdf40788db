package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.transformer.KernelOutput;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Kernel cases shared by the sim test (device vs. a plain fp64 reference written here, independently of the
 * sim kernels) and the GPU equivalence test (CUDA vs. sim). Inputs are seeded and never zero.
 */
public final class Gpt2Cases {

  private Gpt2Cases() {}

  /** fp16 outputs compared exactly. */
  static KernelOutput exactHalves(String name, short[] values, int width) {
    float[] f = new float[values.length];
    Fp16.toFloats(values, 0, f, 0, f.length);
    return KernelOutput.exact(name, f, width);
  }

  /** fp16 outputs: one rounding to half (2^-11 relative) plus fp32 noise. */
  static KernelOutput half(String name, short[] values, int width) {
    float[] f = new float[values.length];
    Fp16.toFloats(values, 0, f, 0, f.length);
    return new KernelOutput(name, f, width, false, 1e-2, 1e-3);
  }

  static KernelOutput half(String name, double[] values, int width) {
    return new KernelOutput(name, KernelOutput.floats(values), width, false, 1e-2, 1e-3);
  }

  /** A kernel launch with its inputs; {@link #run} on a device, {@link #reference} in fp64 on the host. */
  abstract static class Case {
    final String name;

    Case(String name) {
      this.name = name;
    }

    abstract List<KernelOutput> run(Gpt2Device dev);

    abstract List<KernelOutput> reference();

    @Override
    public String toString() {
      return name;
    }
  }

  // ---- data ----

  /** Halves of magnitude in [0.05, 1] * scale, random sign: never zero. */
  static short[] randomHalves(Random rnd, int n, double scale) {
    short[] out = new short[n];
    for (int i = 0; i < n; i++) {
      double v = (0.05 + 0.95 * rnd.nextDouble()) * scale * (rnd.nextBoolean() ? 1 : -1);
      out[i] = Fp16.fromFloat((float) v);
    }
    return out;
  }

  static float[] randomFloats(Random rnd, int n, double scale, double offset) {
    float[] out = new float[n];
    for (int i = 0; i < n; i++) {
      out[i] = (float) (offset + (0.05 + 0.95 * rnd.nextDouble()) * scale * (rnd.nextBoolean() ? 1 : -1));
    }
    return out;
  }

  static double h(short[] a, int i) {
    return Fp16.toFloat(a[i]);
  }

  static double geluNew(double x) {
    return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
  }

  // ---- the kernels ----

  static Case embed(long seed, int M, int C, int vocab, int maxPos) {
    Random rnd = new Random(seed);
    short[] wte = randomHalves(rnd, vocab * C, 1);
    short[] wpe = randomHalves(rnd, maxPos * C, 0.5);
    int[] tokens = new int[M];
    int[] positions = new int[M];
    for (int m = 0; m < M; m++) {
      tokens[m] = m == 0 ? vocab - 1 : rnd.nextInt(vocab);
      positions[m] = m == 0 ? maxPos - 1 : m == 1 ? 0 : rnd.nextInt(maxPos);
    }
    return new Case(String.format("gpt2_embed M=%d C=%d", M, C)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long x = dev.upload(new float[M * C]);
        dev.kernels.embed(dev.stream, dev.upload(wte), dev.upload(wpe), dev.upload(tokens), dev.upload(positions),
            x, M, C);
        return List.of(KernelOutput.exact("x", dev.floats(x, M * C), C));
      }

      @Override
      List<KernelOutput> reference() {
        float[] x = new float[M * C];
        for (int m = 0; m < M; m++) {
          for (int c = 0; c < C; c++) {
            x[m * C + c] = (float) (h(wte, tokens[m] * C + c) + h(wpe, positions[m] * C + c));
          }
        }
        return List.of(KernelOutput.exact("x", x, C));
      }
    };
  }

  static Case layernorm(long seed, int M, int C) {
    Random rnd = new Random(seed);
    float[] x = randomFloats(rnd, M * C, 3, 0.7);
    short[] gamma = randomHalves(rnd, C, 1.5);
    short[] beta = randomHalves(rnd, C, 0.3);
    float eps = 1e-5f;
    return new Case(String.format("gpt2_layernorm M=%d C=%d", M, C)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long y = dev.upload(new short[M * C]);
        dev.kernels.layernorm(dev.stream, dev.upload(x), dev.upload(gamma), dev.upload(beta), y, M, C, eps);
        return List.of(half("y", dev.halves(y, M * C), C));
      }

      @Override
      List<KernelOutput> reference() {
        double[] y = new double[M * C];
        for (int m = 0; m < M; m++) {
          double mean = 0;
          for (int c = 0; c < C; c++) {
            mean += x[m * C + c];
          }
          mean /= C;
          double var = 0;
          for (int c = 0; c < C; c++) {
            double d = x[m * C + c] - mean;
            var += d * d;
          }
          var /= C;
          double rstd = 1 / Math.sqrt(var + eps);
          for (int c = 0; c < C; c++) {
            y[m * C + c] = (x[m * C + c] - mean) * rstd * h(gamma, c) + h(beta, c);
          }
        }
        return List.of(half("y", y, C));
      }
    };
  }

  /** Conv1D matmul; {@code residual}: into an fp32 R, else a half Y (with GELU when {@code gelu}). */
  static Case matmul(long seed, int M, int N, int K, boolean gelu, boolean residual) {
    Random rnd = new Random(seed);
    short[] X = randomHalves(rnd, M * K, 1);
    short[] W = randomHalves(rnd, K * N, 1.7 / Math.sqrt(K));
    short[] bias = randomHalves(rnd, N, 0.2);
    float[] R0 = residual ? randomFloats(rnd, M * N, 2, 0) : null;
    String kernel = residual ? "gpt2_matmul_residual" : "gpt2_matmul";
    return new Case(String.format("%s M=%d N=%d K=%d%s", kernel, M, N, K, gelu ? " gelu" : "")) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long x = dev.upload(X);
        long w = dev.upload(W);
        long b = dev.upload(bias);
        if (residual) {
          long r = dev.upload(R0);
          dev.kernels.matmulResidual(dev.stream, x, w, b, r, M, N, K);
          return List.of(KernelOutput.fp32("R", dev.floats(r, M * N), N));
        }
        long y = dev.upload(new short[M * N]);
        dev.kernels.matmul(dev.stream, x, w, b, y, M, N, K, gelu);
        return List.of(half("Y", dev.halves(y, M * N), N));
      }

      @Override
      List<KernelOutput> reference() {
        double[] acc = new double[M * N];
        float[] w = new float[K * N];
        Fp16.toFloats(W, 0, w, 0, w.length);
        for (int m = 0; m < M; m++) {
          for (int k = 0; k < K; k++) {
            double xv = h(X, m * K + k);
            for (int n = 0; n < N; n++) {
              acc[m * N + n] += xv * w[k * N + n];
            }
          }
          for (int n = 0; n < N; n++) {
            double v = acc[m * N + n] + h(bias, n);
            acc[m * N + n] = residual ? R0[m * N + n] + v : gelu ? geluNew(v) : v;
          }
        }
        return List.of(residual ? KernelOutput.fp32("R", acc, N) : half("Y", acc, N));
      }
    };
  }

  /** Rows m write (b, t) = (cacheRows[m], positions[m]); the pairs are distinct. */
  static Case kvAppend(long seed, int B, int H, int D, int maxT, int[] cacheRows, int[] positions) {
    Random rnd = new Random(seed);
    int M = positions.length;
    int C = H * D;
    short[] qkv = randomHalves(rnd, M * 3 * C, 1);
    short[] k0 = randomHalves(rnd, B * H * maxT * D, 2);
    short[] v0 = randomHalves(rnd, B * H * maxT * D, 2);
    return new Case(String.format("gpt2_kv_append M=%d H=%d D=%d maxT=%d", M, H, D, maxT)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long k = dev.upload(k0);
        long v = dev.upload(v0);
        dev.kernels.kvAppend(dev.stream, dev.upload(qkv), k, v, dev.upload(positions), dev.upload(cacheRows), M,
            H, D, maxT);
        return List.of(exactHalves("kcache", dev.halves(k, k0.length), D),
            exactHalves("vcache", dev.halves(v, v0.length), D));
      }

      @Override
      List<KernelOutput> reference() {
        short[] k = k0.clone();
        short[] v = v0.clone();
        for (int m = 0; m < M; m++) {
          for (int hh = 0; hh < H; hh++) {
            for (int d = 0; d < D; d++) {
              int dst = ((cacheRows[m] * H + hh) * maxT + positions[m]) * D + d;
              k[dst] = qkv[m * 3 * C + C + hh * D + d];
              v[dst] = qkv[m * 3 * C + 2 * C + hh * D + d];
            }
          }
        }
        return List.of(exactHalves("kcache", k, D), exactHalves("vcache", v, D));
      }
    };
  }

  static Case attention(long seed, int B, int H, int D, int maxT, int[] cacheRows, int[] positions) {
    Random rnd = new Random(seed);
    int M = positions.length;
    int C = H * D;
    short[] qkv = randomHalves(rnd, M * 3 * C, 1);
    short[] kc = randomHalves(rnd, B * H * maxT * D, 1);
    short[] vc = randomHalves(rnd, B * H * maxT * D, 1);
    float scale = (float) (1 / Math.sqrt(D)) * 2.5f; // sharper than GPT-2's, so max subtraction matters
    return new Case(String.format("gpt2_attention M=%d H=%d D=%d maxT=%d", M, H, D, maxT)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long out = dev.upload(new short[M * C]);
        dev.kernels.attention(dev.stream, dev.upload(qkv), dev.upload(kc), dev.upload(vc), out,
            dev.upload(positions), dev.upload(cacheRows), M, H, D, maxT, scale);
        return List.of(half("out", dev.halves(out, M * C), C));
      }

      @Override
      List<KernelOutput> reference() {
        double[] out = new double[M * C];
        for (int m = 0; m < M; m++) {
          int T = positions[m] + 1;
          for (int hh = 0; hh < H; hh++) {
            int head = (cacheRows[m] * H + hh) * maxT * D;
            double[] s = new double[T];
            double mx = Double.NEGATIVE_INFINITY;
            for (int t = 0; t < T; t++) {
              double dot = 0;
              for (int d = 0; d < D; d++) {
                dot += h(qkv, m * 3 * C + hh * D + d) * h(kc, head + t * D + d);
              }
              s[t] = scale * dot;
              mx = Math.max(mx, s[t]);
            }
            double sum = 0;
            for (int t = 0; t < T; t++) {
              s[t] = Math.exp(s[t] - mx);
              sum += s[t];
            }
            for (int d = 0; d < D; d++) {
              double o = 0;
              for (int t = 0; t < T; t++) {
                o += s[t] * h(vc, head + t * D + d);
              }
              out[m * C + hh * D + d] = o / sum;
            }
          }
        }
        return List.of(half("out", out, C));
      }
    };
  }

  static Case lmHead(long seed, int M, int V, int C) {
    Random rnd = new Random(seed);
    short[] X = randomHalves(rnd, M * C, 1);
    short[] wte = randomHalves(rnd, V * C, 0.5);
    return new Case(String.format("gpt2_lm_head M=%d V=%d C=%d", M, V, C)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long logits = dev.upload(new float[M * V]);
        dev.kernels.lmHead(dev.stream, dev.upload(X), dev.upload(wte), logits, M, V, C);
        return List.of(KernelOutput.fp32("logits", dev.floats(logits, M * V), V));
      }

      @Override
      List<KernelOutput> reference() {
        double[] logits = new double[M * V];
        float[] x = new float[M * C];
        Fp16.toFloats(X, 0, x, 0, x.length);
        float[] w = new float[C];
        for (int v = 0; v < V; v++) {
          Fp16.toFloats(wte, v * C, w, 0, C);
          for (int m = 0; m < M; m++) {
            double s = 0;
            for (int c = 0; c < C; c++) {
              s += (double) x[m * C + c] * w[c];
            }
            logits[m * V + v] = s;
          }
        }
        return List.of(KernelOutput.fp32("logits", logits, V));
      }
    };
  }

  /**
   * Rows with: a unique max; the max repeated (lowest index wins); NaNs everywhere incl. before the max;
   * -0.0 vs 0.0 as the max; all NaN (-1); all -inf (0); the max at the last index.
   */
  static Case argmax(long seed, int V) {
    Random rnd = new Random(seed);
    List<float[]> rows = new ArrayList<>();
    float[] r = randomFloats(rnd, V, 10, 0);
    r[V / 3] = 50f;
    rows.add(r);
    r = randomFloats(rnd, V, 10, 0);
    r[V - 2] = 50f;
    r[V / 2] = 50f;
    r[7] = 49.999996f;
    rows.add(r);
    r = randomFloats(rnd, V, 10, 0);
    for (int i = 0; i < V; i += 3) {
      r[i] = Float.NaN;
    }
    r[1] = 60f;
    r[0] = Float.NaN;
    r[V - 1] = Float.NaN;
    rows.add(r);
    r = randomFloats(rnd, V, 10, -20);
    r[V - 5] = 0.0f;
    r[V / 4] = -0.0f;
    rows.add(r);
    r = new float[V];
    java.util.Arrays.fill(r, Float.NaN);
    rows.add(r);
    r = new float[V];
    java.util.Arrays.fill(r, Float.NEGATIVE_INFINITY);
    rows.add(r);
    r = randomFloats(rnd, V, 10, 0);
    r[V - 1] = Float.POSITIVE_INFINITY;
    rows.add(r);
    int M = rows.size();
    float[] logits = new float[M * V];
    for (int m = 0; m < M; m++) {
      System.arraycopy(rows.get(m), 0, logits, m * V, V);
    }
    return new Case(String.format("gpt2_argmax M=%d V=%d", M, V)) {
      @Override
      List<KernelOutput> run(Gpt2Device dev) {
        long out = dev.upload(new int[M]);
        dev.kernels.argmax(dev.stream, dev.upload(logits), out, M, V);
        return List.of(KernelOutput.exact("argmax", dev.ints(out, M), 1));
      }

      @Override
      List<KernelOutput> reference() {
        // Independent of the kernels' rule: the first index holding the largest non-NaN value.
        int[] out = new int[M];
        for (int m = 0; m < M; m++) {
          double best = Double.NaN;
          int at = -1;
          for (int v = 0; v < V; v++) {
            double x = logits[m * V + v];
            if (!Double.isNaN(x) && (at < 0 || x > best)) {
              best = x;
              at = v;
            }
          }
          out[m] = at;
        }
        return List.of(KernelOutput.exact("argmax", out, 1));
      }
    };
  }
}
