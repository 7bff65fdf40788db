package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.function.Consumer;
import java.util.stream.IntStream;

/**
 * The Llama kernels on a GPU at Llama-3.1-8B and GPT-2-large shapes ({@code --shape 8b}, the default; {@code small}
 * is a stand-in of the same structure that the simulated device runs in seconds): each product tile, flash prefill and split-KV
 * decode checked and timed, one line per measurement, and a JSON record of them all.
 *
 * <pre>
 * THAW_DEVICE=cuda java -cp 'thaw/lib/*' dev.thaw.examples.llama.LlamaKernelBench [--out RESULTS.json]
 *     [--shape 8b] [--rows 16,128,512,2000,8000] [--prefill 512,2000,8000,32000] [--decode 16,2000,8000,32000]
 * </pre>
 * Checks (bf16 unless said): every product against an fp64 product of the same inputs on sampled rows and columns
 * and, where the WMMA {@code llama_matmul} can compute the same thing, against its whole sampled rows; flash
 * prefill on sampled (row, head) pairs against fp64 attention and, up to 4096 positions, against
 * {@code llama_attention} on the whole output; split-KV decode on every head against fp64. Tolerance: 2e-2 of
 * the value plus 4e-3 of the samples' RMS (16-bit rounding of inputs and outputs, fp32 sums). Times are CUDA-event
 * medians of warm launches. Exit code: 0 every check passed, 1 a check failed, 2 it could not run.
 */
public final class LlamaKernelBench {

  /**
   * The dimensions measured: Llama-3.1-8B's and GPT-2-large's (fp16 products of width {@code gpt2}), or a small
   * stand-in with the same structure, for a run on the simulated device that exercises the harness.
   */
  record Shape(String name, int hidden, int heads, int kvHeads, int headDim, int intermediate, int gpt2) {
    static Shape named(String name) {
      return switch (name) {
        case "8b" -> new Shape("8b", 4096, 32, 8, 128, 14336, 1280);
        case "small" -> new Shape("small", 256, 4, 2, 64, 512, 128);
        default -> throw new IllegalArgumentException("--shape is 8b or small, not " + name);
      };
    }
  }

  private final int hidden;
  private final int heads;
  private final int kvHeads;
  private final int headDim;
  private final int intermediate;
  private final Shape shape;
  private final GpuContext context;
  private final GpuStream stream;
  private final ArrayNode results = JsonNodeFactory.instance.arrayNode();
  private final List<DeviceBuffer> buffers = new ArrayList<>();
  private int failures;

  private LlamaKernelBench(GpuContext context, Shape shape) {
    this.shape = shape;
    this.hidden = shape.hidden();
    this.heads = shape.heads();
    this.kvHeads = shape.kvHeads();
    this.headDim = shape.headDim();
    this.intermediate = shape.intermediate();
    this.context = context;
    this.stream = context.createStream();
  }

  public static void main(String[] args) {
    try {
      System.exit(run(args));
    } catch (Exception e) {
      System.err.println("LlamaKernelBench failed: " + e);
      e.printStackTrace();
      System.exit(2);
    }
  }

  static int run(String[] args) throws Exception {
    String out = null;
    Shape shape = Shape.named("8b");
    int[] rows = {16, 128, 512, 2000, 8000};
    int[] prefill = {512, 2000, 8000, 32000};
    int[] decode = {16, 2000, 8000, 32000};
    for (int i = 0; i < args.length; i++) {
      String v = i + 1 < args.length ? args[i + 1] : null;
      if (v == null) {
        System.err.println(args[i] + " needs a value");
        return 2;
      }
      switch (args[i]) {
        case "--out" -> out = v;
        case "--shape" -> shape = Shape.named(v);
        case "--rows" -> rows = ints(v);
        case "--prefill" -> prefill = ints(v);
        case "--decode" -> decode = ints(v);
        default -> {
          System.err.println("unknown argument " + args[i]);
          return 2;
        }
      }
      i++;
    }
    try (GpuDriver driver = GpuDrivers.open(); GpuContext context = driver.createContext(0)) {
      LlamaKernelBench bench = new LlamaKernelBench(context, shape);
      System.out.println("device: " + context.device().name() + " (" + driver.name() + "), shape " + shape);
      try {
        bench.products(rows);
        bench.gpt2Products();
        bench.prefill(prefill);
        bench.decode(decode);
      } finally {
        // The results so far first: after a device error (a faulting kernel) freeing fails too.
        if (out != null) {
          ObjectNode doc = JsonNodeFactory.instance.objectNode();
          doc.put("device", context.device().name());
          doc.put("multiprocessors", context.device().multiprocessorCount());
          doc.put("shape", shape.name());
          doc.put("failures", bench.failures);
          doc.set("results", bench.results);
          new ObjectMapper().writerWithDefaultPrettyPrinter().writeValue(new File(out), doc);
        }
        bench.free();
        bench.stream.close();
      }
      System.out.println(bench.failures == 0 ? "RESULT: PASS (every check)" : "RESULT: FAIL (" + bench.failures
          + " checks failed)");
      return bench.failures == 0 ? 0 : 1;
    }
  }

  // ---- products ----

  /** One of the 8B's four products (gate|up twice: stored, and with SwiGLU fused). */
  private record Projection(String name, int n, int k, Epilogue epilogue) {}

  private void products(int[] rowCounts) {
    int maxM = Arrays.stream(rowCounts).max().orElse(1);
    HalfType bf = HalfType.BF16;
    List<Projection> projections = List.of(new Projection("qkv", (heads + 2 * kvHeads) * headDim, hidden, Epilogue.STORE),
        new Projection("o", hidden, hidden, Epilogue.RESIDUAL),
        new Projection("gate_up", 2 * intermediate, hidden, Epilogue.STORE),
        new Projection("gate_up+swiglu", 2 * intermediate, hidden, Epilogue.SWIGLU),
        new Projection("down", hidden, intermediate, Epilogue.RESIDUAL));
    try (LlamaKernels k = LlamaKernels.load(context, bf)) {
      short[] x = random(bf, (long) maxM * intermediate, 1.0, 1);
      long xd = upload(x);
      short[] w = null;
      long wd = 0;
      int wn = -1;
      int wk = -1;
      long outBytes = (long) maxM * 2 * intermediate * 4;
      long out = allocate(outBytes);
      long ref = allocate(outBytes);
      for (Projection p : projections) {
        if (p.n != wn || p.k != wk) {
          w = random(bf, (long) p.n * p.k, 2.0 / Math.sqrt(p.k), 2 + p.n + p.k);
          wd = upload(w);
          wn = p.n;
          wk = p.k;
        }
        for (int m : rowCounts) {
          product(k, bf, shape.name() + " " + p.name, m, p.n, p.k, p.epilogue, x, xd, w, wd, out, ref, outBytes);
        }
        if (p.epilogue != Epilogue.SWIGLU) {
          product(k, bf, shape.name() + " " + p.name, 1, p.n, p.k, p.epilogue, x, xd, w, wd, out, ref, outBytes);
        }
      }
    } finally {
      free();
    }
  }

  /** GPT-2-large's products (fp16): qkv 1280 -> 3840, fc 1280 -> 5120, proj 5120 -> 1280, 512 rows. */
  private void gpt2Products() {
    HalfType fp = HalfType.FP16;
    int m = 512;
    int c = shape.gpt2();
    int[][] shapes = {{3 * c, c}, {4 * c, c}, {c, 4 * c}};
    String[] names = {"qkv", "fc", "proj"};
    try (LlamaKernels k = LlamaKernels.load(context, fp)) {
      short[] x = random(fp, (long) m * 4 * c, 1.0, 31);
      long xd = upload(x);
      long outBytes = (long) m * 4 * c * 4;
      long out = allocate(outBytes);
      long ref = allocate(outBytes);
      for (int i = 0; i < shapes.length; i++) {
        short[] w = random(fp, (long) shapes[i][0] * shapes[i][1], 2.0 / Math.sqrt(shapes[i][1]), 40 + i);
        product(k, fp, (shape.name().equals("8b") ? "gpt2-large " : "gpt2-small ") + names[i], m, shapes[i][0], shapes[i][1], Epilogue.STORE, x, xd, w, upload(w),
            out, ref, outBytes);
      }
    } finally {
      free();
    }
  }

  /** Times and checks every kernel that computes this product: the gemv (M <= 8) or the three tiles + WMMA. */
  private void product(LlamaKernels k, HalfType type, String what, int m, int n, int kk, Epilogue e, short[] x,
      long xd, short[] w, long wd, long out, long ref, long outBytes) {
    int width = e == Epilogue.SWIGLU ? n / 2 : n;
    boolean half = e == Epilogue.STORE || e == Epilogue.SWIGLU;
    int[] sampleRows = sampleRows(m);
    int[] sampleCols = sampleColumns(width);
    double[] exact = exactProduct(type, x, w, kk, n, e, sampleRows, sampleCols);
    float[][] wmmaRows = null;
    if (e != Epilogue.SWIGLU && m > LlamaKernels.GEMV_MAX_ROWS) {
      context.memsetD8(ref, (byte) 0, outBytes);
      k.matmul(stream, xd, wd, 0, ref, m, n, kk, e);
      wmmaRows = rows(ref, type, half, width, sampleRows);
    }
    List<String> kernels = new ArrayList<>();
    if (m <= LlamaKernels.GEMV_MAX_ROWS) {
      kernels.add(m == 1 ? LlamaKernels.GEMV1 : LlamaKernels.GEMV);
    } else {
      for (GemmTile t : k.gemmTiles()) {
        kernels.add(t.entry());
      }
      if (e != Epilogue.SWIGLU) {
        kernels.add(LlamaKernels.MATMUL);
      }
    }
    String picked = m <= LlamaKernels.GEMV_MAX_ROWS ? kernels.get(0) : k.tileFor(m, n, e).entry();
    for (String kernel : kernels) {
      Consumer<GpuStream> launch = s -> launchProduct(k, kernel, s, xd, wd, out, m, n, kk, e);
      context.memsetD8(out, (byte) 0, outBytes);
      launch.accept(stream);
      float[][] got = rows(out, type, half, width, sampleRows);
      String check = compare(got, sampleCols, exact, null);
      if (check == null && wmmaRows != null && !kernel.equals(LlamaKernels.MATMUL)) {
        check = compare(got, null, null, wmmaRows);
      }
      double ms = time(launch);
      double flops = 2.0 * m * n * kk;
      double bytes = 2.0 * ((double) n * kk + (double) m * kk) + (half ? 2.0 : 4.0) * m * width;
      ObjectNode r = record("product", what, kernel, ms, check);
      r.put("M", m).put("N", n).put("K", kk).put("epilogue", e.name()).put("picked", kernel.equals(picked))
          .put("tflops", flops / ms / 1e9).put("gbps", bytes / ms / 1e6);
      System.out.printf(Locale.ROOT, "product %-20s M=%5d N=%5d K=%5d %-9s %-20s %9.4f ms %7.1f TFLOP/s %7.0f GB/s"
          + "%s  %s%n", what, m, n, kk, e, kernel, ms, flops / ms / 1e9, bytes / ms / 1e6,
          kernel.equals(picked) ? " (picked)" : "", check == null ? "ok" : "FAIL " + check);
    }
  }

  private static void launchProduct(LlamaKernels k, String kernel, GpuStream s, long x, long w, long out, int m,
      int n, int kk, Epilogue e) {
    if (kernel.equals(LlamaKernels.MATMUL)) {
      k.matmul(s, x, w, 0, out, m, n, kk, e);
    } else if (kernel.equals(LlamaKernels.GEMV) || kernel.equals(LlamaKernels.GEMV1)) {
      k.gemv(s, x, w, 0, out, m, n, kk, e);
    } else {
      k.gemm(s, GemmTile.of(kernel), x, w, 0, out, m, n, kk, e);
    }
  }

  /** The exact epilogue(X W^T) at the sampled rows and columns (R starts at zero for RESIDUAL). */
  private static double[] exactProduct(HalfType type, short[] x, short[] w, int k, int n, Epilogue e, int[] rows,
      int[] cols) {
    double[] out = new double[rows.length * cols.length];
    for (int i = 0; i < rows.length; i++) {
      for (int j = 0; j < cols.length; j++) {
        double v = dot(type, x, (long) rows[i] * k, w, (long) cols[j] * k, k);
        if (e == Epilogue.SWIGLU) {
          double u = dot(type, x, (long) rows[i] * k, w, (long) (n / 2 + cols[j]) * k, k);
          v = v / (1 + Math.exp(-v)) * u;
        }
        out[i * cols.length + j] = v;
      }
    }
    return out;
  }

  private static double dot(HalfType type, short[] a, long aOff, short[] b, long bOff, int k) {
    double s = 0;
    for (int i = 0; i < k; i++) {
      s += (double) type.toFloat(a[(int) (aOff + i)]) * type.toFloat(b[(int) (bOff + i)]);
    }
    return s;
  }

  // ---- attention ----

  /** Flash prefill over one prompt of T tokens, 8B heads; against fp64 and, up to 4096, llama_attention. */
  private void prefill(int[] lengths) {
    HalfType bf = HalfType.BF16;
    int width = (heads + 2 * kvHeads) * headDim;
    float scale = (float) (1 / Math.sqrt(headDim));
    try (LlamaKernels k = LlamaKernels.load(context, bf)) {
      for (int t : lengths) {
        try {
          short[] qkv = random(bf, (long) t * width, 2.0, 50 + t);
          short[] kc = random(bf, (long) kvHeads * t * headDim, 2.0, 60 + t);
          short[] vc = random(bf, (long) kvHeads * t * headDim, 1.0, 70 + t);
          int[] positions = new int[t];
          for (int i = 0; i < t; i++) {
            positions[i] = i;
          }
          long q = upload(qkv);
          long kd = upload(kc);
          long vd = upload(vc);
          long pos = upload(positions);
          long rows = upload(new int[t]);
          long outBytes = 2L * t * heads * headDim;
          long out = allocate(outBytes);
          long plain = 0;
          for (boolean wide : new boolean[] {false, true}) {
            String kernel = wide ? LlamaKernels.FLASH_ATTENTION_WIDE : LlamaKernels.FLASH_ATTENTION;
            Consumer<GpuStream> launch = s -> k.flashAttention(s, wide, q, kd, vd, out, pos, rows, t, heads, kvHeads,
                headDim, t, scale);
            context.memsetD8(out, (byte) 0, outBytes);
            launch.accept(stream);
            int[] sampleRows = sampleRows(t);
            int[] checked = {0, heads / 2 + 1, heads - 1};
            String check = attentionCheck(out, bf, qkv, kc, vc, t, sampleRows, checked, scale, positions);
            if (check == null && t <= LlamaKernels.MAX_CONTEXT) {
              if (plain == 0) {
                plain = allocate(outBytes);
                k.attention(stream, q, kd, vd, plain, pos, rows, t, heads, kvHeads, headDim, t, scale);
              }
              int all = heads * headDim;
              float[][] a = rows(out, bf, true, all, sampleRows(t));
              float[][] b = rows(plain, bf, true, all, sampleRows(t));
              check = compare(a, null, null, b);
            }
            double ms = time(launch);
            double flops = 4.0 * headDim * heads * ((double) t * (t + 1) / 2);
            boolean picked = wide == (t >= LlamaKernels.FLASH_WIDE_FROM_ROWS);
            ObjectNode r = record("prefill", shape.name() + " attention", kernel, ms, check);
            r.put("tokens", t).put("tflops", flops / ms / 1e9).put("picked", picked);
            System.out.printf(Locale.ROOT, "prefill attention %6d tokens %d/%d heads D=%d %-26s %9.4f ms %7.1f "
                + "TFLOP/s%s  %s%n", t, heads, kvHeads, headDim, kernel, ms, flops / ms / 1e9,
                picked ? " (picked)" : "", check == null ? "ok" : "FAIL " + check);
          }
        } finally {
          free();
        }
      }
    }
  }

  /** Split-KV decode, one row (and 4 rows at 2000 or the last context), each context in one shared cache. */
  private void decode(int[] contexts) {
    HalfType bf = HalfType.BF16;
    int maxT = shape.name().equals("8b") ? 32768 : 1;
    for (int c : contexts) {
      maxT = Math.max(maxT, c);
    }
    int width = (heads + 2 * kvHeads) * headDim;
    float scale = (float) (1 / Math.sqrt(headDim));
    int batchRows = 4;
    try (LlamaKernels k = LlamaKernels.load(context, bf)) {
      short[] kc = random(bf, (long) batchRows * kvHeads * maxT * headDim, 2.0, 80);
      short[] vc = random(bf, (long) batchRows * kvHeads * maxT * headDim, 1.0, 81);
      short[] qkv = random(bf, (long) batchRows * width, 2.0, 82);
      long kd = upload(kc);
      long vd = upload(vc);
      long q = upload(qkv);
      long partial = allocate(4 * LlamaKernels.decodePartialFloats(batchRows, heads, headDim,
          LlamaKernels.MAX_SPLITS));
      long out = allocate(2L * batchRows * heads * headDim);
      List<int[]> cases = new ArrayList<>();
      for (int c : contexts) {
        cases.add(new int[] {c, 1});
      }
      cases.add(new int[] {Math.min(2000, contexts[contexts.length - 1]), batchRows});
      for (int[] cs : cases) {
        int ctx = cs[0];
        int m = cs[1];
        int[] positions = new int[m];
        int[] cacheRows = new int[m];
        for (int i = 0; i < m; i++) {
          positions[i] = ctx - 1 - 7 * i;
          cacheRows[i] = i;
        }
        long pos = upload(positions);
        long rows = upload(cacheRows);
        int splits = LlamaKernels.decodeSplits(ctx, m, heads, kvHeads);
        int mt = maxT;
        Consumer<GpuStream> launch = s -> k.flashDecode(s, q, kd, vd, partial, out, pos, rows, m, heads, kvHeads,
            headDim, mt, scale, splits);
        launch.accept(stream);
        String check = decodeCheck(out, bf, qkv, kc, vc, m, maxT, positions, scale);
        double ms = time(launch);
        double bytes = 2.0 * 2 * kvHeads * headDim * Arrays.stream(positions).mapToDouble(p -> p + 1).sum();
        ObjectNode r = record("decode", shape.name() + " attention", LlamaKernels.FLASH_DECODE + "+combine", ms, check);
        r.put("context", ctx).put("rows", m).put("splits", splits).put("gbps", bytes / ms / 1e6);
        System.out.printf(Locale.ROOT, "decode attention context %6d rows %d splits %2d %9.4f ms (%6.1f us) %7.0f GB/s"
            + "  %s%n", ctx, m, splits, ms, ms * 1e3, bytes / ms / 1e6, check == null ? "ok" : "FAIL " + check);
      }
    } finally {
      free();
    }
  }

  private String attentionCheck(long out, HalfType type, short[] qkv, short[] kc, short[] vc, int t, int[] rows,
      int[] checked, float scale, int[] positions) {
    int all = heads * headDim;
    float[][] got = rows(out, type, true, all, rows);
    double[] exact = new double[rows.length * checked.length * headDim];
    double[] allowance = new double[exact.length];
    float[][] picked = new float[rows.length][checked.length * headDim];
    for (int i = 0; i < rows.length; i++) {
      for (int h = 0; h < checked.length; h++) {
        double[] o = exactAttention(type, qkv, (long) rows[i] * (heads + 2 * kvHeads) * headDim
            + (long) checked[h] * headDim, kc, vc, ((long) checked[h] / (heads / kvHeads)) * t * headDim,
            positions[rows[i]] + 1, scale);
        System.arraycopy(o, 0, exact, (i * checked.length + h) * headDim, headDim);
        // The kernel rounds each softmax weight to the 16-bit type before P.V: at most half an ulp of it each.
        double u = type == HalfType.BF16 ? 0x1p-8 : 0x1p-11;
        for (int d = 0; d < headDim; d++) {
          allowance[(i * checked.length + h) * headDim + d] = u * o[headDim + d];
        }
        System.arraycopy(got[i], checked[h] * headDim, picked[i], h * headDim, headDim);
      }
    }
    int[] cols = new int[checked.length * headDim];
    for (int j = 0; j < cols.length; j++) {
      cols[j] = j;
    }
    return compare(picked, cols, exact, null, allowance);
  }

  private String decodeCheck(long out, HalfType type, short[] qkv, short[] kc, short[] vc, int m, int maxT,
      int[] positions, float scale) {
    int all = heads * headDim;
    int[] rows = new int[m];
    for (int i = 0; i < m; i++) {
      rows[i] = i;
    }
    float[][] got = rows(out, type, true, all, rows);
    double[] exact = new double[m * all];
    for (int i = 0; i < m; i++) {
      for (int h = 0; h < heads; h++) {
        long head = ((long) i * kvHeads + h / (heads / kvHeads)) * maxT * headDim;
        double[] o = exactAttention(type, qkv, (long) i * (heads + 2 * kvHeads) * headDim + (long) h * headDim, kc,
            vc, head, positions[i] + 1, scale);
        System.arraycopy(o, 0, exact, i * all + h * headDim, headDim);
      }
    }
    int[] cols = new int[all];
    for (int j = 0; j < all; j++) {
      cols[j] = j;
    }
    return compare(got, cols, exact, null);
  }

  /**
   * softmax(scale q.k_t) . v over t < len in fp64, keys and values from {@code head} in rows of headDim; then,
   * at [headDim, 2 headDim), {@code sum_t p_t |v_t[d]|}.
   */
  private double[] exactAttention(HalfType type, short[] qkv, long qAt, short[] kc, short[] vc, long head,
      int len, float scale) {
    double[] s = new double[len];
    double mx = Double.NEGATIVE_INFINITY;
    for (int t = 0; t < len; t++) {
      s[t] = scale * dot(type, qkv, qAt, kc, head + (long) t * headDim, headDim);
      mx = Math.max(mx, s[t]);
    }
    double sum = 0;
    double[] o = new double[2 * headDim];
    for (int t = 0; t < len; t++) {
      double p = Math.exp(s[t] - mx);
      sum += p;
      for (int d = 0; d < headDim; d++) {
        double v = type.toFloat(vc[(int) (head + (long) t * headDim + d)]);
        o[d] += p * v;
        o[headDim + d] += p * Math.abs(v);
      }
    }
    for (int d = 0; d < 2 * headDim; d++) {
      o[d] /= sum;
    }
    return o;
  }

  // ---- comparison, timing, memory ----

  /**
   * Null when every value agrees: {@code got[i][cols[j]]} with {@code exact[i * cols + j]}, or {@code got} with
   * {@code other} everywhere; else the first disagreement and how many there are.
   */
  private static String compare(float[][] got, int[] cols, double[] exact, float[][] other) {
    return compare(got, cols, exact, other, null);
  }

  /** {@link #compare} with {@code allowance[i * cols + j]} added to the tolerance of each exact value. */
  private static String compare(float[][] got, int[] cols, double[] exact, float[][] other, double[] allowance) {
    double rms = 0;
    long n = 0;
    for (int i = 0; i < got.length; i++) {
      int w = exact != null ? cols.length : got[i].length;
      for (int j = 0; j < w; j++) {
        double e = exact != null ? exact[i * cols.length + j] : other[i][j];
        rms += e * e;
        n++;
      }
    }
    rms = Math.sqrt(rms / Math.max(1, n));
    int bad = 0;
    String first = null;
    for (int i = 0; i < got.length; i++) {
      int w = exact != null ? cols.length : got[i].length;
      for (int j = 0; j < w; j++) {
        double e = exact != null ? exact[i * cols.length + j] : other[i][j];
        double g = exact != null ? got[i][cols[j]] : got[i][j];
        double err = Math.abs(g - e);
        double extra = allowance != null ? allowance[i * cols.length + j] : 0;
        if (!(err <= 2e-2 * Math.abs(e) + 4e-3 * rms + extra)) {
          if (first == null) {
            first = String.format(Locale.ROOT, "sample row %d col %d: %s %.6g, got %.6g", i,
                exact != null ? cols[j] : j, exact != null ? "fp64" : "reference kernel", e, g);
          }
          bad++;
        }
      }
    }
    return bad == 0 ? null : bad + " of " + n + " values differ, first " + first;
  }

  /** Median ms of warm launches: at least 5 and until 40 ms of them or 30 launches. */
  private double time(Consumer<GpuStream> launch) {
    try (GpuEvent start = context.createEvent(); GpuEvent end = context.createEvent()) {
      launch.accept(stream);
      launch.accept(stream);
      List<Double> t = new ArrayList<>();
      double total = 0;
      while (t.size() < 5 || (total < 40 && t.size() < 30)) {
        start.record(stream);
        launch.accept(stream);
        end.record(stream);
        end.synchronize();
        double ms = end.elapsedMillisSince(start);
        t.add(ms);
        total += ms;
      }
      t.sort(null);
      return t.size() % 2 == 1 ? t.get(t.size() / 2) : (t.get(t.size() / 2 - 1) + t.get(t.size() / 2)) / 2;
    }
  }

  private ObjectNode record(String section, String what, String kernel, double ms, String check) {
    if (check != null) {
      failures++;
    }
    ObjectNode r = results.addObject();
    r.put("section", section).put("what", what).put("kernel", kernel).put("ms", ms).put("check",
        check == null ? "ok" : check);
    return r;
  }

  /** The given rows of a [*, width] output, 16-bit or fp32, as floats. */
  private float[][] rows(long base, HalfType type, boolean half, int width, int[] rows) {
    stream.synchronize();
    int bytes = (half ? 2 : 4) * width;
    ByteBuffer b = ByteBuffer.allocateDirect(bytes).order(ByteOrder.LITTLE_ENDIAN);
    float[][] out = new float[rows.length][width];
    for (int i = 0; i < rows.length; i++) {
      b.clear();
      context.copyDeviceToHost(b, base + (long) rows[i] * bytes);
      for (int j = 0; j < width; j++) {
        out[i][j] = half ? type.toFloat(b.getShort(2 * j)) : b.getFloat(4 * j);
      }
    }
    return out;
  }

  private static int[] sampleRows(int m) {
    return Arrays.stream(new int[] {0, 1, m / 3, m / 2 + 1, m - 2, m - 1}).filter(r -> r >= 0 && r < m).distinct()
        .toArray();
  }

  /** 61 spread columns, the first and the last included. */
  private static int[] sampleColumns(int n) {
    return IntStream.range(0, 61).map(i -> (int) ((long) i * (n - 1) / 60)).distinct().toArray();
  }

  /** Values uniform in +-scale, never zero, from a fixed seed (xorshift: the 8B's tensors are 10^8 values). */
  private static short[] random(HalfType type, long n, double scale, long seed) {
    short[] out = new short[Math.toIntExact(n)];
    long s = seed * 0x9E3779B97F4A7C15L + 1;
    for (int i = 0; i < out.length; i++) {
      s ^= s << 13;
      s ^= s >>> 7;
      s ^= s << 17;
      double u = ((s >>> 11) * 0x1.0p-53) * 2 - 1;
      out[i] = type.fromFloat((float) ((Math.abs(u) < 0.01 ? 0.01 : u) * scale));
    }
    return out;
  }

  private long allocate(long bytes) {
    DeviceBuffer b = context.allocate(bytes);
    buffers.add(b);
    return b.address();
  }

  private long upload(short[] a) {
    ByteBuffer b = ByteBuffer.allocateDirect(2 * a.length).order(ByteOrder.LITTLE_ENDIAN);
    b.asShortBuffer().put(a);
    long at = allocate(b.capacity());
    context.copyHostToDevice(at, b);
    return at;
  }

  private long upload(int[] a) {
    ByteBuffer b = ByteBuffer.allocateDirect(4 * Math.max(1, a.length)).order(ByteOrder.LITTLE_ENDIAN);
    b.asIntBuffer().put(a);
    long at = allocate(b.capacity());
    context.copyHostToDevice(at, b);
    return at;
  }

  private void free() {
    stream.synchronize();
    for (DeviceBuffer b : buffers) {
      b.close();
    }
    buffers.clear();
  }

  private static int[] ints(String csv) {
    return Arrays.stream(csv.split(",")).map(String::trim).filter(s -> !s.isEmpty()).mapToInt(Integer::parseInt)
        .toArray();
  }
}
