package dev.thaw.examples.llama.kernels;

import static dev.thaw.examples.transformer.KernelOutput.exact;
import static dev.thaw.examples.transformer.KernelOutput.floats;
import static dev.thaw.examples.transformer.KernelOutput.fp32;

import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.transformer.KernelOutput;
import java.util.List;
import java.util.Random;

/**
 * Kernel cases shared by the sim test (device vs. a plain fp64 reference written here, independently of the
 * twins) and the GPU equivalence test (CUDA vs. sim). Inputs are seeded and never zero. Outputs and their
 * comparison are {@link KernelOutput}'s.
 */
final class LlamaCases {

  private LlamaCases() {}

  /** A kernel launch with its inputs; {@link #run} on a device, {@link #reference} in fp64 on the host. */
  abstract static class Case {
    final String name;

    Case(String name) {
      this.name = name;
    }

    abstract List<KernelOutput> run(LlamaDevice dev);

    abstract List<KernelOutput> reference();

    /** Whether it launches a wgmma product (the sm_90a module on a compute capability 9.0 device only). */
    boolean wgmma() {
      return false;
    }

    @Override
    public String toString() {
      return name;
    }
  }

  /** 16-bit outputs: one rounding (2^-9 relative for bf16, 2^-12 for fp16) plus fp32 noise, either side. */
  static KernelOutput half(HalfType type, String name, short[] values, int width) {
    float[] f = new float[values.length];
    type.toFloats(values, 0, f, 0, f.length);
    return tolerant(type, name, f, width);
  }

  static KernelOutput tolerant(HalfType type, String name, float[] values, int width) {
    return type == HalfType.BF16 ? new KernelOutput(name, values, width, false, 2e-2, 4e-3)
        : new KernelOutput(name, values, width, false, 1e-2, 1e-3);
  }

  /** 16-bit values of magnitude in [0.05, 1] * scale, random sign: never zero. */
  static short[] random(HalfType type, Random rnd, int n, double scale) {
    short[] out = new short[n];
    for (int i = 0; i < n; i++) {
      double v = (0.05 + 0.95 * rnd.nextDouble()) * scale * (rnd.nextBoolean() ? 1 : -1);
      out[i] = type.fromFloat((float) v);
    }
    return out;
  }

  static float[] randomFloats(Random rnd, int n, double scale) {
    float[] out = new float[n];
    for (int i = 0; i < n; i++) {
      out[i] = (float) ((0.05 + 0.95 * rnd.nextDouble()) * scale * (rnd.nextBoolean() ? 1 : -1));
    }
    return out;
  }

  static double[] values(HalfType type, short[] a) {
    double[] d = new double[a.length];
    for (int i = 0; i < a.length; i++) {
      d[i] = type.toFloat(a[i]);
    }
    return d;
  }

  // ---- the kernels ----

  static Case embed(long seed, HalfType type, int M, int C, int V) {
    Random rnd = new Random(seed);
    short[] table = random(type, rnd, V * C, 1);
    int[] tokens = new int[M];
    for (int m = 0; m < M; m++) {
      tokens[m] = m == 0 ? V - 1 : m == 1 ? -1 : m == 2 ? V : rnd.nextInt(V);
    }
    return new Case(String.format("llama_embed %s M=%d C=%d V=%d", type, M, C, V)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long x = dev.upload(randomFloats(rnd, M * C, 1));
        dev.kernels(type).embed(dev.stream, dev.upload(table), dev.upload(tokens), x, M, C, V);
        return List.of(exact("x", dev.floats(x, M * C), C));
      }

      @Override
      List<KernelOutput> reference() {
        double[] t = values(type, table);
        float[] x = new float[M * C];
        for (int m = 0; m < M; m++) {
          for (int c = 0; c < C; c++) {
            x[m * C + c] = tokens[m] >= 0 && tokens[m] < V ? (float) t[tokens[m] * C + c] : 0f;
          }
        }
        return List.of(exact("x", x, C));
      }
    };
  }

  static Case rmsnorm(long seed, HalfType type, int M, int C) {
    Random rnd = new Random(seed);
    float[] x = randomFloats(rnd, M * C, 3);
    short[] w = random(type, rnd, C, 1.5);
    float eps = 1e-5f;
    return new Case(String.format("llama_rmsnorm %s M=%d C=%d", type, M, C)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long y = dev.upload(new short[M * C]);
        dev.kernels(type).rmsnorm(dev.stream, dev.upload(x), dev.upload(w), y, M, C, eps);
        return List.of(half(type, "y", dev.halves(y, M * C), C));
      }

      @Override
      List<KernelOutput> reference() {
        double[] wd = values(type, w);
        double[] y = new double[M * C];
        for (int m = 0; m < M; m++) {
          double s = 0;
          for (int c = 0; c < C; c++) {
            s += (double) x[m * C + c] * x[m * C + c];
          }
          double r = 1 / Math.sqrt(s / C + eps);
          for (int c = 0; c < C; c++) {
            y[m * C + c] = x[m * C + c] * r * wd[c];
          }
        }
        return List.of(tolerant(type, "y", floats(y), C));
      }
    };
  }

  /**
   * {@code out = epilogue(X W^T)} through {@link LlamaKernels#linear} (so M <= 8 is the gemv, else the
   * tensor-core matmul); {@code bias} only with STORE.
   */
  static Case linear(long seed, HalfType type, int M, int N, int K, Epilogue epilogue, boolean bias) {
    Random rnd = new Random(seed);
    double xs = 1.0 / Math.sqrt(K);
    short[] X = random(type, rnd, M * K, 1);
    short[] W = random(type, rnd, N * K, 2 * xs);
    short[] b = bias ? random(type, rnd, N, 0.5) : null;
    float[] r0 = randomFloats(rnd, M * N, 1);
    String kernel = M == 1 ? "llama_gemv1" : M <= LlamaKernels.GEMV_MAX_ROWS ? "llama_gemv" : "llama_matmul";
    return new Case(String.format("%s %s M=%d N=%d K=%d %s%s", kernel, type, M, N, K, epilogue,
        bias ? "+bias" : "")) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long out = epilogue == Epilogue.STORE ? dev.upload(new short[M * N]) : dev.upload(r0);
        dev.kernels(type).linear(dev.stream, dev.upload(X), dev.upload(W), bias ? dev.upload(b) : 0, out, M, N, K,
            epilogue);
        if (epilogue == Epilogue.STORE) {
          return List.of(half(type, "Y", dev.halves(out, M * N), N));
        }
        return List.of(fp32(epilogue == Epilogue.RESIDUAL ? "R" : "L", dev.floats(out, M * N), N));
      }

      @Override
      List<KernelOutput> reference() {
        double[] x = values(type, X);
        double[] w = values(type, W);
        double[] y = new double[M * N];
        for (int m = 0; m < M; m++) {
          for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
              s += x[m * K + k] * w[n * K + k];
            }
            y[m * N + n] = switch (epilogue) {
              case STORE -> bias ? s + type.toFloat(b[n]) : s;
              case RESIDUAL -> r0[m * N + n] + s;
              case FLOAT -> s;
              case SWIGLU -> throw new IllegalArgumentException("SWIGLU cases are gemm cases");
            };
          }
        }
        if (epilogue == Epilogue.STORE) {
          return List.of(tolerant(type, "Y", floats(y), N));
        }
        return List.of(fp32(epilogue == Epilogue.RESIDUAL ? "R" : "L", floats(y), N));
      }
    };
  }

  /** Rows of a random qkv with positions and cache rows; the caches start random (rows not written survive). */
  static Case ropeKv(long seed, HalfType type, int B, int Hq, int Hkv, int D, int maxT, float[] invFreq,
      int[] cacheRows, int[] positions) {
    Random rnd = new Random(seed);
    int M = positions.length;
    int width = (Hq + 2 * Hkv) * D;
    short[] qkv = random(type, rnd, M * width, 1);
    int cacheLen = B * Hkv * maxT * D;
    short[] k0 = random(type, rnd, cacheLen, 1);
    short[] v0 = random(type, rnd, cacheLen, 1);
    return new Case(String.format("llama_rope_kv %s M=%d Hq=%d Hkv=%d D=%d maxT=%d", type, M, Hq, Hkv, D, maxT)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long q = dev.upload(qkv);
        long kc = dev.upload(k0);
        long vc = dev.upload(v0);
        dev.kernels(type).ropeKv(dev.stream, q, kc, vc, dev.upload(invFreq), dev.upload(positions),
            dev.upload(cacheRows), M, Hq, Hkv, D, maxT);
        return List.of(half(type, "qkv", dev.halves(q, M * width), width), half(type, "kcache",
            dev.halves(kc, cacheLen), D), exact("vcache", floats(values(type, dev.halves(vc, cacheLen))), D));
      }

      @Override
      List<KernelOutput> reference() {
        double[] q = values(type, qkv);
        double[] kc = values(type, k0);
        double[] vc = values(type, v0);
        int hd = D / 2;
        for (int m = 0; m < M; m++) {
          for (int h = 0; h < Hq + Hkv; h++) {
            for (int d = 0; d < hd; d++) {
              double angle = (float) positions[m] * invFreq[d];
              double x1 = q[m * width + h * D + d];
              double x2 = q[m * width + h * D + d + hd];
              double y1 = x1 * Math.cos(angle) - x2 * Math.sin(angle);
              double y2 = x2 * Math.cos(angle) + x1 * Math.sin(angle);
              if (h < Hq) {
                q[m * width + h * D + d] = y1;
                q[m * width + h * D + d + hd] = y2;
              } else {
                int at = ((cacheRows[m] * Hkv + h - Hq) * maxT + positions[m]) * D + d;
                kc[at] = y1;
                kc[at + hd] = y2;
              }
            }
          }
          for (int h = 0; h < Hkv; h++) {
            int at = ((cacheRows[m] * Hkv + h) * maxT + positions[m]) * D;
            for (int d = 0; d < D; d++) {
              vc[at + d] = q[m * width + (Hq + Hkv + h) * D + d];
            }
          }
        }
        return List.of(tolerant(type, "qkv", floats(q), width), tolerant(type, "kcache", floats(kc), D),
            exact("vcache", floats(vc), D));
      }
    };
  }

  /**
   * {@code out = epilogue(X W^T)} through the tensor-core {@link LlamaKernels#gemm} with one tile; SWIGLU takes W
   * as gate | up rows ([N, K]) and writes [M, N/2].
   */
  static Case gemm(long seed, HalfType type, LlamaKernels.GemmTile tile, int M, int N, int K, Epilogue epilogue,
      boolean bias) {
    Random rnd = new Random(seed);
    double xs = 1.0 / Math.sqrt(K);
    short[] X = random(type, rnd, M * K, 1);
    short[] W = random(type, rnd, N * K, 2 * xs);
    short[] b = bias ? random(type, rnd, N, 0.5) : null;
    int width = epilogue == Epilogue.SWIGLU ? N / 2 : N;
    float[] r0 = randomFloats(rnd, M * width, 1);
    return new Case(String.format("%s %s M=%d N=%d K=%d %s%s", tile.entry(), type, M, N, K, epilogue,
        bias ? "+bias" : "")) {
      @Override
      boolean wgmma() {
        return tile.wgmma();
      }

      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        boolean half = epilogue == Epilogue.STORE || epilogue == Epilogue.SWIGLU;
        long out = half ? dev.upload(new short[M * width]) : dev.upload(r0);
        dev.kernels(type).gemm(dev.stream, tile, dev.upload(X), dev.upload(W), bias ? dev.upload(b) : 0, out, M, N,
            K, epilogue);
        if (half) {
          return List.of(half(type, "Y", dev.halves(out, M * width), width));
        }
        return List.of(fp32(epilogue == Epilogue.RESIDUAL ? "R" : "L", dev.floats(out, M * width), width));
      }

      @Override
      List<KernelOutput> reference() {
        double[] x = values(type, X);
        double[] w = values(type, W);
        double[] s = new double[M * N];
        for (int m = 0; m < M; m++) {
          for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
              acc += x[m * K + k] * w[n * K + k];
            }
            s[m * N + n] = acc;
          }
        }
        double[] y = new double[M * width];
        for (int m = 0; m < M; m++) {
          for (int n = 0; n < width; n++) {
            double v = s[m * N + n];
            y[m * width + n] = switch (epilogue) {
              case STORE -> bias ? v + type.toFloat(b[n]) : v;
              case RESIDUAL -> r0[m * width + n] + v;
              case FLOAT -> v;
              case SWIGLU -> v / (1 + Math.exp(-v)) * s[m * N + width + n];
            };
          }
        }
        if (epilogue == Epilogue.STORE || epilogue == Epilogue.SWIGLU) {
          return List.of(tolerant(type, "Y", floats(y), width));
        }
        return List.of(fp32(epilogue == Epilogue.RESIDUAL ? "R" : "L", floats(y), width));
      }
    };
  }

  /** Rows of consecutive positions per sequence: sequence i has {@code lengths[i]} rows from {@code starts[i]}. */
  static int[][] prompts(int[] lengths, int[] starts) {
    int M = 0;
    for (int l : lengths) {
      M += l;
    }
    int[] positions = new int[M];
    int[] rows = new int[M];
    int m = 0;
    for (int i = 0; i < lengths.length; i++) {
      for (int j = 0; j < lengths[i]; j++) {
        positions[m] = starts[i] + j;
        rows[m++] = i;
      }
    }
    return new int[][] {rows, positions};
  }

  /** How an attention case launches: the kernel under test and its arguments. */
  enum AttentionKernel {
    /** llama_attention. */
    PLAIN,
    /** llama_flash_attention. */
    FLASH,
    /** llama_flash_attention_128. */
    FLASH_WIDE,
    /** llama_flash_decode + llama_flash_combine, splits from {@link LlamaKernels#decodeSplits}. */
    DECODE
  }

  static Case attention(long seed, HalfType type, int B, int Hq, int Hkv, int D, int maxT, int[] cacheRows,
      int[] positions) {
    return attention(seed, type, B, Hq, Hkv, D, maxT, cacheRows, positions, AttentionKernel.PLAIN, 0);
  }

  /** {@code splits} is for {@link AttentionKernel#DECODE}; 0 takes {@link LlamaKernels#decodeSplits}. */
  static Case attention(long seed, HalfType type, int B, int Hq, int Hkv, int D, int maxT, int[] cacheRows,
      int[] positions, AttentionKernel kernel, int splits) {
    Random rnd = new Random(seed);
    int M = positions.length;
    int width = (Hq + 2 * Hkv) * D;
    short[] qkv = random(type, rnd, M * width, 1);
    int cacheLen = B * Hkv * maxT * D;
    short[] kc = random(type, rnd, cacheLen, 1);
    short[] vc = random(type, rnd, cacheLen, 1);
    float scale = (float) (1 / Math.sqrt(D));
    int maxLen = 0;
    for (int p : positions) {
      maxLen = Math.max(maxLen, p + 1);
    }
    int split = splits > 0 ? splits : LlamaKernels.decodeSplits(maxLen, M, Hq, Hkv);
    String name = switch (kernel) {
      case PLAIN -> "llama_attention";
      case FLASH -> "llama_flash_attention";
      case FLASH_WIDE -> "llama_flash_attention_128";
      case DECODE -> "llama_flash_decode+combine splits=" + split;
    };
    return new Case(String.format("%s %s M=%d Hq=%d Hkv=%d D=%d maxT=%d", name, type, M, Hq, Hkv, D, maxT)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long out = dev.upload(new short[M * Hq * D]);
        LlamaKernels k = dev.kernels(type);
        long q = dev.upload(qkv);
        long kk = dev.upload(kc);
        long vv = dev.upload(vc);
        long pos = dev.upload(positions);
        long rows = dev.upload(cacheRows);
        switch (kernel) {
          case PLAIN -> k.attention(dev.stream, q, kk, vv, out, pos, rows, M, Hq, Hkv, D, maxT, scale);
          case FLASH, FLASH_WIDE -> k.flashAttention(dev.stream, kernel == AttentionKernel.FLASH_WIDE, q, kk, vv,
              out, pos, rows, M, Hq, Hkv, D, maxT, scale);
          case DECODE -> {
            long partial = dev.upload(new float[(int) LlamaKernels.decodePartialFloats(M, Hq, D, split)]);
            k.flashDecode(dev.stream, q, kk, vv, partial, out, pos, rows, M, Hq, Hkv, D, maxT, scale, split);
          }
          default -> throw new IllegalStateException(kernel.toString());
        }
        return List.of(half(type, "out", dev.halves(out, M * Hq * D), Hq * D));
      }

      @Override
      List<KernelOutput> reference() {
        double[] q = values(type, qkv);
        double[] k = values(type, kc);
        double[] v = values(type, vc);
        double[] out = new double[M * Hq * D];
        // Flash prefill rounds each weight to the 16-bit type before P.V (the denominator keeps fp32): with u half
        // an ulp of the type (relative), out[d] carries at most u * sum_t p_t |v_t[d]| beyond fp32 noise.
        boolean flash = kernel == AttentionKernel.FLASH || kernel == AttentionKernel.FLASH_WIDE;
        double[] allowance = flash ? new double[M * Hq * D] : null;
        double u = type == HalfType.BF16 ? 0x1p-8 : 0x1p-11;
        for (int m = 0; m < M; m++) {
          int len = positions[m] + 1;
          for (int h = 0; h < Hq; h++) {
            int head = (cacheRows[m] * Hkv + h / (Hq / Hkv)) * maxT * D;
            double[] p = new double[len];
            double mx = Double.NEGATIVE_INFINITY;
            for (int t = 0; t < len; t++) {
              double dot = 0;
              for (int d = 0; d < D; d++) {
                dot += q[m * width + h * D + d] * k[head + t * D + d];
              }
              p[t] = scale * dot;
              mx = Math.max(mx, p[t]);
            }
            double sum = 0;
            for (int t = 0; t < len; t++) {
              p[t] = Math.exp(p[t] - mx);
              sum += p[t];
            }
            for (int d = 0; d < D; d++) {
              double o = 0;
              double magnitude = 0;
              for (int t = 0; t < len; t++) {
                o += p[t] * v[head + t * D + d];
                magnitude += p[t] * Math.abs(v[head + t * D + d]);
              }
              out[m * Hq * D + h * D + d] = o / sum;
              if (allowance != null) {
                allowance[m * Hq * D + h * D + d] = u * magnitude / sum;
              }
            }
          }
        }
        KernelOutput o = tolerant(type, "out", floats(out), Hq * D);
        return List.of(allowance != null ? o.withAllowance(allowance) : o);
      }
    };
  }

  static Case swiglu(long seed, HalfType type, int M, int I) {
    Random rnd = new Random(seed);
    short[] gu = random(type, rnd, M * 2 * I, 4);
    return new Case(String.format("llama_swiglu %s M=%d I=%d", type, M, I)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long y = dev.upload(new short[M * I]);
        dev.kernels(type).swiglu(dev.stream, dev.upload(gu), y, M, I);
        return List.of(half(type, "y", dev.halves(y, M * I), I));
      }

      @Override
      List<KernelOutput> reference() {
        double[] v = values(type, gu);
        double[] y = new double[M * I];
        for (int m = 0; m < M; m++) {
          for (int i = 0; i < I; i++) {
            double g = v[m * 2 * I + i];
            y[m * I + i] = g / (1 + Math.exp(-g)) * v[m * 2 * I + I + i];
          }
        }
        return List.of(tolerant(type, "y", floats(y), I));
      }
    };
  }

  static Case argmax(long seed, int M, int V) {
    Random rnd = new Random(seed);
    float[] logits = randomFloats(rnd, M * V, 10);
    if (M > 1) {
      logits[V + 7] = 50f; // a tie with a later index: the lower wins
      logits[V + V - 1] = 50f;
    }
    return new Case(String.format("llama_argmax M=%d V=%d", M, V)) {
      @Override
      List<KernelOutput> run(LlamaDevice dev) {
        long out = dev.upload(new int[M]);
        dev.kernels(HalfType.BF16).argmax(dev.stream, dev.upload(logits), out, M, V);
        return List.of(exact("ids", dev.ints(out, M), M));
      }

      @Override
      List<KernelOutput> reference() {
        int[] ids = new int[M];
        for (int m = 0; m < M; m++) {
          int best = 0;
          for (int v = 1; v < V; v++) {
            if (logits[m * V + v] > logits[m * V + best]) {
              best = v;
            }
          }
          ids[m] = best;
        }
        return List.of(exact("ids", ids, M));
      }
    };
  }
}
