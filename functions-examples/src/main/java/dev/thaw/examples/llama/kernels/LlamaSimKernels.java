package dev.thaw.examples.llama.kernels;

import static dev.thaw.examples.transformer.SimLaunches.ceilDiv;
import static dev.thaw.examples.transformer.SimLaunches.expectShape;

import dev.thaw.examples.transformer.ArgmaxSim;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;

/**
 * The Java twins of the kernels in {@code llama.cu}, for the simulated device: the same functions with the same
 * roundings to the 16-bit type at the same points, touching exactly the bytes the CUDA kernels touch for the
 * launches {@link LlamaKernels} makes (kernels that are not grid-stride refuse any other grid).
 *
 * <p>Bit-exact against the GPU: embed, argmax, the v copy of rope_kv. Otherwise the twins sum in another order
 * (the GPU: tensor-core or warp-tree order, {@code rsqrtf}, {@code expf}, {@code sincosf}, fused multiply-adds;
 * the twins: sequential fp32, and {@code Math.exp}/{@code sin}/{@code cos} in double, then cast), so fp32
 * results agree to a few ulp of the sum of magnitudes and 16-bit results to one ulp of their type.
 */
public final class LlamaSimKernels {

  private LlamaSimKernels() {}

  /** {@code llama_embed(table, tokens, x, M, C, V, bf16)}. */
  public static final class Embed implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.EMBED;
    }

    @Override
    public void launch(SimLaunch launch) {
      long table = launch.pointer(0);
      long tokens = launch.pointer(1);
      long x = launch.pointer(2);
      int M = launch.intArg(3);
      int C = launch.intArg(4);
      int V = launch.intArg(5);
      HalfType type = HalfType.ofFlag(launch.intArg(6));
      DeviceMemory memory = launch.memory();
      int[] ids = ints(memory, tokens, M);
      short[] h = new short[C];
      float[] row = new float[C];
      for (int m = 0; m < M; m++) {
        if (ids[m] >= 0 && ids[m] < V) {
          memory.getShorts(table + 2L * ids[m] * C, h, 0, C);
          type.toFloats(h, 0, row, 0, C);
        } else {
          Arrays.fill(row, 0f);
        }
        memory.putFloats(x + 4L * m * C, row, 0, C);
      }
    }
  }

  /** {@code llama_rmsnorm(x, w, y, M, C, eps, bf16)}: {@code y = T((x * r) * w)}, r = 1/sqrt(mean(x^2) + eps). */
  public static final class RmsNorm implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.RMSNORM;
    }

    @Override
    public void launch(SimLaunch launch) {
      long x = launch.pointer(0);
      long w = launch.pointer(1);
      long y = launch.pointer(2);
      int M = launch.intArg(3);
      int C = launch.intArg(4);
      float eps = launch.floatArg(5);
      HalfType type = HalfType.ofFlag(launch.intArg(6));
      DeviceMemory memory = launch.memory();
      float[] gamma = halves(memory, type, w, C);
      float[] row = new float[C];
      short[] out = new short[C];
      for (int m = 0; m < M; m++) {
        memory.getFloats(x + 4L * m * C, row, 0, C);
        float s = 0f;
        for (int c = 0; c < C; c++) {
          s += row[c] * row[c];
        }
        float r = (float) (1.0 / Math.sqrt(s / C + eps));
        for (int c = 0; c < C; c++) {
          out[c] = type.fromFloat(row[c] * r * gamma[c]);
        }
        memory.putShorts(y + 2L * m * C, out, 0, C);
      }
    }
  }

  /** {@code llama_gemv(X, W, bias, out, M, N, K, mode, has_bias, bf16)}, grid ceil(N/8) x 256. */
  public static final class Gemv implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.GEMV;
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(4);
      int N = launch.intArg(5);
      if (M <= 0 || M > LlamaKernels.GEMV_MAX_ROWS || N <= 0) {
        throw new IllegalArgumentException("llama_gemv: bad shape M=" + M + " N=" + N);
      }
      expectShape(launch, ceilDiv(N, LlamaKernels.GEMV_COLUMNS), 1, LlamaKernels.GEMV_THREADS);
      product(launch);
    }
  }

  /** {@code llama_gemv1(...)}: {@link Gemv} for M = 1, grid ceil(N/8) x 256. */
  public static final class Gemv1 implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.GEMV1;
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(4);
      int N = launch.intArg(5);
      if (M != 1 || N <= 0) {
        throw new IllegalArgumentException("llama_gemv1: bad shape M=" + M + " N=" + N + " (M must be 1)");
      }
      expectShape(launch, ceilDiv(N, LlamaKernels.GEMV_COLUMNS), 1, LlamaKernels.GEMV_THREADS);
      product(launch);
    }
  }

  /** {@code llama_matmul(X, W, bias, out, M, N, K, mode, has_bias, bf16)}, grid (ceil(N/64), ceil(M/64)) x 128. */
  public static final class Matmul implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.MATMUL;
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(4);
      int N = launch.intArg(5);
      if (M <= 0 || N <= 0) {
        throw new IllegalArgumentException("llama_matmul: bad shape M=" + M + " N=" + N);
      }
      expectShape(launch, ceilDiv(N, LlamaKernels.MATMUL_TILE), ceilDiv(M, LlamaKernels.MATMUL_TILE),
          LlamaKernels.MATMUL_THREADS);
      product(launch);
    }
  }

  /**
   * The tensor-core products, one twin per {@link LlamaKernels.GemmTile}: {@link #product} on its grid (mma.sync:
   * (column tiles, row tiles); wgmma: a 1-D grid of all tiles, with the tile's dynamic shared memory).
   */
  abstract static class Gemm implements SimKernel {
    private final LlamaKernels.GemmTile tile;

    Gemm(LlamaKernels.GemmTile tile) {
      this.tile = tile;
    }

    @Override
    public String entry() {
      return tile.entry();
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(4);
      int N = launch.intArg(5);
      LlamaKernels.Epilogue e = LlamaKernels.Epilogue.of(launch.intArg(7));
      if (M <= 0 || N <= 0 || (e == LlamaKernels.Epilogue.SWIGLU && N % 2 != 0)) {
        throw new IllegalArgumentException(tile.entry() + ": bad shape M=" + M + " N=" + N + " " + e);
      }
      if (tile.wgmma()) {
        long blocks = tile.blocks(M, N, e);
        expectShape(launch, (int) Math.min(blocks, Integer.MAX_VALUE), 1, tile.threads);
        if (launch.sharedMemBytes() < tile.sharedBytes()) {
          throw new IllegalArgumentException(tile.entry() + " needs " + tile.sharedBytes()
              + " bytes of dynamic shared memory; launched with " + launch.sharedMemBytes());
        }
      } else {
        expectShape(launch, tile.columnTiles(N, e), tile.rowTiles(M), tile.threads);
      }
      product(launch);
    }
  }

  /** {@code llama_gemm_128x128(X, W, bias, out, M, N, K, mode, has_bias, bf16)}. */
  public static final class GemmLarge extends Gemm {
    public GemmLarge() {
      super(LlamaKernels.GemmTile.LARGE);
    }
  }

  /** {@code llama_gemm_64x64(...)}. */
  public static final class GemmMedium extends Gemm {
    public GemmMedium() {
      super(LlamaKernels.GemmTile.MEDIUM);
    }
  }

  /** {@code llama_gemm_32x32(...)}. */
  public static final class GemmSmall extends Gemm {
    public GemmSmall() {
      super(LlamaKernels.GemmTile.SMALL);
    }
  }

  /** {@code llama_wgmma_128x256(...)}: the sm_90a module's. */
  public static final class WgmmaLarge extends Gemm {
    public WgmmaLarge() {
      super(LlamaKernels.GemmTile.WGMMA_LARGE);
    }
  }

  /** {@code llama_wgmma_128x128(...)}. */
  public static final class WgmmaMedium extends Gemm {
    public WgmmaMedium() {
      super(LlamaKernels.GemmTile.WGMMA_MEDIUM);
    }
  }

  /** {@code llama_wgmma_64x128(...)}. */
  public static final class WgmmaSmall extends Gemm {
    public WgmmaSmall() {
      super(LlamaKernels.GemmTile.WGMMA_SMALL);
    }
  }

  /** Rows computed per sweep over W in {@link #product}: bounds the heap at ROW_BLOCK * (N + K) floats. */
  private static final int ROW_BLOCK = 64;

  /**
   * Every product: {@code out = epilogue(X W^T)}, fp32 sums in k order. Reads X [0, M K), W [0, N K), bias [0, N)
   * when has_bias, and R [0, M N) for the residual epilogue; writes out [0, M N), or [0, M N/2) for SwiGLU
   * ({@code y = T(silu(T(g)) * T(u))}, g the sum of gate column j, u of up column N/2 + j).
   */
  static void product(SimLaunch launch) {
    long X = launch.pointer(0);
    long W = launch.pointer(1);
    long bias = launch.pointer(2);
    long out = launch.pointer(3);
    int M = launch.intArg(4);
    int N = launch.intArg(5);
    int K = launch.intArg(6);
    LlamaKernels.Epilogue epilogue = LlamaKernels.Epilogue.of(launch.intArg(7));
    boolean hasBias = launch.intArg(8) != 0;
    HalfType type = HalfType.ofFlag(launch.intArg(9));
    if (K <= 0 || K % 8 != 0) {
      throw new IllegalArgumentException(launch.kernelName() + ": bad K " + K);
    }
    DeviceMemory memory = launch.memory();
    float[] b = hasBias && epilogue == LlamaKernels.Epilogue.STORE ? halves(memory, type, bias, N) : null;
    int rowBlock = Math.min(M, ROW_BLOCK);
    float[] xs = new float[rowBlock * K];
    short[] h = new short[Math.max(rowBlock * K, Math.max(K, rowBlock * N))];
    float[] w = new float[K];
    float[] acc = new float[rowBlock * N];
    for (int m0 = 0; m0 < M; m0 += rowBlock) {
      int rows = Math.min(rowBlock, M - m0);
      memory.getShorts(X + 2L * m0 * K, h, 0, rows * K);
      type.toFloats(h, 0, xs, 0, rows * K);
      for (int n = 0; n < N; n++) {
        memory.getShorts(W + 2L * n * K, h, 0, K);
        type.toFloats(h, 0, w, 0, K);
        for (int r = 0; r < rows; r++) {
          float s = 0f;
          int xb = r * K;
          for (int k = 0; k < K; k++) {
            s += xs[xb + k] * w[k];
          }
          acc[r * N + n] = s;
        }
      }
      long first = (long) m0 * N;
      int count = rows * N;
      switch (epilogue) {
        case STORE -> {
          if (b != null) {
            for (int i = 0; i < count; i++) {
              acc[i] = acc[i] + b[i % N];
            }
          }
          type.fromFloats(acc, 0, h, 0, count);
          memory.putShorts(out + 2L * first, h, 0, count);
        }
        case RESIDUAL -> {
          float[] res = new float[count];
          memory.getFloats(out + 4L * first, res, 0, count);
          for (int i = 0; i < count; i++) {
            res[i] = res[i] + acc[i];
          }
          memory.putFloats(out + 4L * first, res, 0, count);
        }
        case FLOAT -> memory.putFloats(out + 4L * first, acc, 0, count);
        case SWIGLU -> {
          int I = N / 2;
          for (int r = 0; r < rows; r++) {
            for (int j = 0; j < I; j++) {
              float g = type.toFloat(type.fromFloat(acc[r * N + j]));
              float u = type.toFloat(type.fromFloat(acc[r * N + I + j]));
              h[r * I + j] = type.fromFloat(silu(g) * u);
            }
          }
          memory.putShorts(out + 2L * m0 * I, h, 0, rows * I);
        }
      }
    }
  }

  /** {@code llama_rope_kv(qkv, kcache, vcache, inv_freq, positions, cache_rows, M, Hq, Hkv, D, maxT, bf16)}. */
  public static final class RopeKv implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.ROPE_KV;
    }

    @Override
    public void launch(SimLaunch launch) {
      long qkv = launch.pointer(0);
      long kcache = launch.pointer(1);
      long vcache = launch.pointer(2);
      long invFreq = launch.pointer(3);
      long positions = launch.pointer(4);
      long cacheRows = launch.pointer(5);
      int M = launch.intArg(6);
      int Hq = launch.intArg(7);
      int Hkv = launch.intArg(8);
      int D = launch.intArg(9);
      int maxT = launch.intArg(10);
      HalfType type = HalfType.ofFlag(launch.intArg(11));
      DeviceMemory memory = launch.memory();
      int hd = D / 2;
      int width = (Hq + 2 * Hkv) * D;
      int[] pos = ints(memory, positions, M);
      int[] rows = ints(memory, cacheRows, M);
      float[] freq = new float[hd];
      memory.getFloats(invFreq, freq, 0, hd);
      short[] row = new short[width];
      short[] head = new short[D];
      for (int m = 0; m < M; m++) {
        long rowAt = qkv + 2L * m * width;
        memory.getShorts(rowAt, row, 0, width);
        for (int hh = 0; hh < Hq + Hkv; hh++) {
          int base = hh * D;
          for (int d = 0; d < hd; d++) {
            float angle = (float) pos[m] * freq[d];
            float c = (float) Math.cos(angle);
            float s = (float) Math.sin(angle);
            float x1 = type.toFloat(row[base + d]);
            float x2 = type.toFloat(row[base + d + hd]);
            head[d] = type.fromFloat(x1 * c - x2 * s);
            head[d + hd] = type.fromFloat(x2 * c + x1 * s);
          }
          if (hh < Hq) {
            memory.putShorts(rowAt + 2L * base, head, 0, D);
          } else {
            memory.putShorts(kcache + 2L * cacheAt(rows[m], hh - Hq, pos[m], Hkv, maxT, D), head, 0, D);
          }
        }
        for (int hh = 0; hh < Hkv; hh++) {
          memory.putShorts(vcache + 2L * cacheAt(rows[m], hh, pos[m], Hkv, maxT, D), row, (Hq + Hkv + hh) * D, D);
        }
      }
    }
  }

  private static long cacheAt(int row, int kvHead, int pos, int Hkv, int maxT, int D) {
    return (((long) row * Hkv + kvHead) * maxT + pos) * D;
  }

  /** {@code llama_attention(qkv, kcache, vcache, out, positions, cache_rows, M, Hq, Hkv, D, maxT, scale, bf16)}. */
  public static final class Attention implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.ATTENTION;
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(6);
      int Hq = launch.intArg(7);
      expectShape(launch, Hq, M, LlamaKernels.ATTENTION_THREADS);
      attend(launch, LlamaKernels.MAX_CONTEXT, false);
    }
  }

  /**
   * {@code llama_flash_attention(...)}, the arguments of {@link Attention}, grid (ceil(M/64), Hq): the same
   * function for any position below maxT, computed as the kernel computes it. Keys go in tiles of 64 from
   * position 0; each tile's scores {@code s = (q.k) * (scale * log2 e)} raise the running maximum m, the sums so
   * far are rescaled by {@code 2^(m_old - m)}, the weights {@code P = 2^(s - m)} are summed in fp32 into the
   * denominator and rounded to the 16-bit type for P.V; the output is {@code T(o * (1 / l))}. What remains
   * different is fp32 order (the tensor cores' dot products and sums, {@code ex2.approx}), so a weight may round
   * to the neighbouring 16-bit value where the fp32 values straddle a rounding boundary.
   */
  public static class FlashAttention implements SimKernel {
    private final String entry;
    private final int rows;
    private final int threads;

    public FlashAttention() {
      this(LlamaKernels.FLASH_ATTENTION, LlamaKernels.FLASH_ROWS, LlamaKernels.FLASH_THREADS);
    }

    FlashAttention(String entry, int rows, int threads) {
      this.entry = entry;
      this.rows = rows;
      this.threads = threads;
    }

    @Override
    public String entry() {
      return entry;
    }

    @Override
    public void launch(SimLaunch launch) {
      int M = launch.intArg(6);
      int Hq = launch.intArg(7);
      int D = launch.intArg(9);
      if (M <= 0 || !LlamaKernels.FLASH_HEAD_SIZES.contains(D)) {
        throw new IllegalArgumentException(entry + ": bad shape M=" + M + " D=" + D);
      }
      expectShape(launch, ceilDiv(M, rows), Hq, threads);
      attend(launch, Integer.MAX_VALUE, true);
    }
  }

  /** {@code llama_flash_attention_128(...)}: {@link FlashAttention} on blocks of 128 rows, grid (ceil(M/128), Hq). */
  public static final class FlashAttentionWide extends FlashAttention {
    public FlashAttentionWide() {
      super(LlamaKernels.FLASH_ATTENTION_WIDE, LlamaKernels.FLASH_WIDE_ROWS, LlamaKernels.FLASH_WIDE_THREADS);
    }
  }

  /** Keys per tile of llama_flash_attention's online softmax. */
  static final int FLASH_KEYS = 64;
  private static final float LOG2E = 1.4426950408889634f;

  /**
   * One row and head of {@link FlashAttention}: {@code o = (sum_t T(P_t) v_t) * (1 / l)} over keys [0, len) with
   * the kernel's tiles, running maximum and roundings (scores in {@code p}, scratch of at least len floats).
   */
  static void flashHead(HalfType type, float[] q, float[] k, float[] v, int len, int D, float scale, float[] p,
      float[] o) {
    float scaleLog2 = scale * LOG2E;
    float max = Float.NEGATIVE_INFINITY;
    float sum = 0f;
    Arrays.fill(o, 0, D, 0f);
    for (int t0 = 0; t0 < len; t0 += FLASH_KEYS) {
      int t1 = Math.min(len, t0 + FLASH_KEYS);
      float tileMax = Float.NEGATIVE_INFINITY;
      for (int t = t0; t < t1; t++) {
        float dot = 0f;
        int kb = t * D;
        for (int d = 0; d < D; d++) {
          dot += q[d] * k[kb + d];
        }
        p[t] = dot * scaleLog2;
        tileMax = Math.max(tileMax, p[t]);
      }
      float next = Math.max(max, tileMax);
      float alpha = (float) Math.pow(2, max - next);
      max = next;
      float tileSum = 0f;
      for (int t = t0; t < t1; t++) {
        float w = (float) Math.pow(2, p[t] - next);
        tileSum += w;
        p[t] = type.toFloat(type.fromFloat(w));
      }
      sum = sum * alpha + tileSum;
      for (int d = 0; d < D; d++) {
        float acc = o[d] * alpha;
        for (int t = t0; t < t1; t++) {
          acc += p[t] * v[t * D + d];
        }
        o[d] = acc;
      }
    }
    float inv = sum > 0f ? 1f / sum : 0f;
    for (int d = 0; d < D; d++) {
      o[d] = o[d] * inv;
    }
  }

  /**
   * Causal GQA attention of every row over its cache positions 0..positions[m]: reads q of each row and head,
   * keys and values [0, positions[m]] of its cache row and KV head; writes out [M, Hq D]. {@code flash}: as
   * {@link #flashHead} computes it, else exact softmax weights in fp32 (llama_attention).
   */
  private static void attend(SimLaunch launch, int contextLimit, boolean flash) {
    long qkv = launch.pointer(0);
    long kcache = launch.pointer(1);
    long vcache = launch.pointer(2);
    long out = launch.pointer(3);
    long positions = launch.pointer(4);
    long cacheRows = launch.pointer(5);
    int M = launch.intArg(6);
    int Hq = launch.intArg(7);
    int Hkv = launch.intArg(8);
    int D = launch.intArg(9);
    int maxT = launch.intArg(10);
    float scale = launch.floatArg(11);
    HalfType type = HalfType.ofFlag(launch.intArg(12));
    checkHeads(launch, Hq, Hkv, D);
    DeviceMemory memory = launch.memory();
    int[] pos = ints(memory, positions, M);
    int[] rows = ints(memory, cacheRows, M);
    int limit = Math.min(maxT, contextLimit);
    int maxLen = 0;
    for (int m = 0; m < M; m++) {
      if (pos[m] < 0 || pos[m] >= limit) {
        throw new IllegalArgumentException(launch.kernelName() + ": positions[" + m + "] = " + pos[m]
            + " outside [0, " + limit + ")");
      }
      maxLen = Math.max(maxLen, pos[m] + 1);
    }
    int width = (Hq + 2 * Hkv) * D;
    int group = Hq / Hkv;
    float[] q = new float[D];
    float[] o = new float[D];
    short[] h = new short[Math.max(maxLen * D, D)];
    float[] k = new float[maxLen * D];
    float[] v = new float[maxLen * D];
    float[] p = new float[maxLen];
    for (int m = 0; m < M; m++) {
      int len = pos[m] + 1;
      for (int hq = 0; hq < Hq; hq++) {
        memory.getShorts(qkv + 2L * ((long) m * width + (long) hq * D), h, 0, D);
        type.toFloats(h, 0, q, 0, D);
        long head = 2L * cacheAt(rows[m], hq / group, 0, Hkv, maxT, D);
        memory.getShorts(kcache + head, h, 0, len * D);
        type.toFloats(h, 0, k, 0, len * D);
        memory.getShorts(vcache + head, h, 0, len * D);
        type.toFloats(h, 0, v, 0, len * D);
        if (flash) {
          flashHead(type, q, k, v, len, D, scale, p, o);
        } else {
          float mx = scores(q, k, 0, len, D, scale, p);
          float sum = 0f;
          for (int t = 0; t < len; t++) {
            p[t] = (float) Math.exp(p[t] - mx);
            sum += p[t];
          }
          Arrays.fill(o, 0f);
          weightedValues(p, v, 0, len, D, o);
          for (int d = 0; d < D; d++) {
            o[d] = o[d] / sum;
          }
        }
        type.fromFloats(o, 0, h, 0, D);
        memory.putShorts(out + 2L * ((long) m * Hq * D + (long) hq * D), h, 0, D);
      }
    }
  }

  /** {@code p[t] = scale * q.k_t} for t in [from, to) (k rows relative to from); returns their maximum. */
  private static float scores(float[] q, float[] k, int from, int to, int D, float scale, float[] p) {
    float mx = Float.NEGATIVE_INFINITY;
    for (int t = from; t < to; t++) {
      float dot = 0f;
      int kb = (t - from) * D;
      for (int d = 0; d < D; d++) {
        dot += q[d] * k[kb + d];
      }
      p[t - from] = scale * dot;
      mx = Math.max(mx, p[t - from]);
    }
    return mx;
  }

  /** {@code o[d] += sum_t p[t] v_t[d]} for t in [from, to), in t order (p and v relative to from). */
  private static void weightedValues(float[] p, float[] v, int from, int to, int D, float[] o) {
    for (int t = from; t < to; t++) {
      int vb = (t - from) * D;
      float pt = p[t - from];
      for (int d = 0; d < D; d++) {
        o[d] += pt * v[vb + d];
      }
    }
  }

  private static void checkHeads(SimLaunch launch, int Hq, int Hkv, int D) {
    if (D <= 0 || D > LlamaKernels.MAX_HEAD_SIZE || D % 8 != 0 || Hkv <= 0 || Hq % Hkv != 0) {
      throw new IllegalArgumentException(launch.kernelName() + ": bad heads Hq=" + Hq + " Hkv=" + Hkv + " D=" + D);
    }
  }

  /**
   * {@code llama_flash_decode(qkv, kcache, vcache, partial, positions, cache_rows, M, Hq, Hkv, D, maxT, scale,
   * bf16)}, grid (Hkv ceil(G/4), M, splits): for each row, head and range s of the row's keys (len =
   * positions[m] + 1 cut into ranges of ceil(len / splits)), the unnormalised partial o, max and sum, fp32 in key
   * order. The GPU takes the range 256 keys at a time with a running max; the sums agree to fp32 rounding.
   */
  public static final class FlashDecode implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.FLASH_DECODE;
    }

    @Override
    public void launch(SimLaunch launch) {
      long qkv = launch.pointer(0);
      long kcache = launch.pointer(1);
      long vcache = launch.pointer(2);
      long partial = launch.pointer(3);
      long positions = launch.pointer(4);
      long cacheRows = launch.pointer(5);
      int M = launch.intArg(6);
      int Hq = launch.intArg(7);
      int Hkv = launch.intArg(8);
      int D = launch.intArg(9);
      int maxT = launch.intArg(10);
      float scale = launch.floatArg(11);
      HalfType type = HalfType.ofFlag(launch.intArg(12));
      checkHeads(launch, Hq, Hkv, D);
      int group = Hq / Hkv;
      int splits = launch.grid().z();
      if (M <= 0 || splits > LlamaKernels.MAX_SPLITS) {
        throw new IllegalArgumentException("llama_flash_decode: bad shape M=" + M + " splits=" + splits);
      }
      Dim3 g = launch.grid();
      int slices = ceilDiv(group, LlamaKernels.DECODE_HEADS);
      if (g.x() != Hkv * slices || g.y() != M || launch.block().x() != LlamaKernels.DECODE_THREADS
          || launch.block().y() != 1 || launch.block().z() != 1) {
        throw new IllegalArgumentException(String.format("llama_flash_decode is written for grid (%d, %d, splits) x "
            + "block (%d, 1, 1); launched as grid %s x block %s", Hkv * slices, M, LlamaKernels.DECODE_THREADS, g,
            launch.block()));
      }
      DeviceMemory memory = launch.memory();
      int[] pos = ints(memory, positions, M);
      int[] rows = ints(memory, cacheRows, M);
      int width = (Hq + 2 * Hkv) * D;
      long stats = partial + 4L * M * Hq * splits * D;
      float[] q = new float[D];
      short[] h = new short[D];
      float[] o = new float[D];
      for (int m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= maxT) {
          throw new IllegalArgumentException("llama_flash_decode: positions[" + m + "] = " + pos[m]
              + " outside [0, " + maxT + ")");
        }
        int len = pos[m] + 1;
        int per = ceilDiv(len, splits);
        float[] k = new float[per * D];
        float[] v = new float[per * D];
        float[] p = new float[per];
        short[] kv = new short[per * D];
        for (int hq = 0; hq < Hq; hq++) {
          memory.getShorts(qkv + 2L * ((long) m * width + (long) hq * D), h, 0, D);
          type.toFloats(h, 0, q, 0, D);
          long head = 2L * cacheAt(rows[m], hq / group, 0, Hkv, maxT, D);
          for (int s = 0; s < splits; s++) {
            int begin = Math.min(len, s * per);
            int end = Math.min(len, begin + per);
            int n = end - begin;
            Arrays.fill(o, 0f);
            float mx = Float.NEGATIVE_INFINITY;
            float sum = 0f;
            if (n > 0) {
              memory.getShorts(kcache + head + 2L * begin * D, kv, 0, n * D);
              type.toFloats(kv, 0, k, 0, n * D);
              memory.getShorts(vcache + head + 2L * begin * D, kv, 0, n * D);
              type.toFloats(kv, 0, v, 0, n * D);
              mx = scores(q, k, begin, end, D, scale, p);
              for (int t = 0; t < n; t++) {
                p[t] = (float) Math.exp(p[t] - mx);
                sum += p[t];
              }
              weightedValues(p, v, begin, end, D, o);
            }
            long slot = ((long) m * Hq + hq) * splits + s;
            memory.putFloats(partial + 4L * slot * D, o, 0, D);
            memory.putFloats(stats + 8L * slot, new float[] {mx, sum}, 0, 2);
          }
        }
      }
    }
  }

  /**
   * {@code llama_flash_combine(partial, out, M, Hq, D, splits, bf16)}, grid (Hq, M): {@code out = T(sum_s o_s w_s /
   * sum_s l_s w_s)}, {@code w_s = exp(max_s - max)}, in split order.
   */
  public static final class FlashCombine implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.FLASH_COMBINE;
    }

    @Override
    public void launch(SimLaunch launch) {
      long partial = launch.pointer(0);
      long out = launch.pointer(1);
      int M = launch.intArg(2);
      int Hq = launch.intArg(3);
      int D = launch.intArg(4);
      int splits = launch.intArg(5);
      HalfType type = HalfType.ofFlag(launch.intArg(6));
      if (M <= 0 || Hq <= 0 || D <= 0 || splits < 1 || splits > LlamaKernels.MAX_SPLITS) {
        throw new IllegalArgumentException("llama_flash_combine: bad shape M=" + M + " Hq=" + Hq + " D=" + D
            + " splits=" + splits);
      }
      expectShape(launch, Hq, M, LlamaKernels.DECODE_THREADS);
      DeviceMemory memory = launch.memory();
      long rows = (long) M * Hq;
      float[] stats = new float[2 * splits];
      float[] parts = new float[splits * D];
      float[] w = new float[splits];
      float[] o = new float[D];
      short[] h = new short[D];
      for (long mh = 0; mh < rows; mh++) {
        memory.getFloats(partial + 4L * (rows * splits * D + mh * splits * 2), stats, 0, 2 * splits);
        memory.getFloats(partial + 4L * mh * splits * D, parts, 0, splits * D);
        float mx = Float.NEGATIVE_INFINITY;
        for (int s = 0; s < splits; s++) {
          mx = Math.max(mx, stats[2 * s]);
        }
        float sum = 0f;
        for (int s = 0; s < splits; s++) {
          w[s] = mx == Float.NEGATIVE_INFINITY ? 0f : (float) Math.exp(stats[2 * s] - mx);
          sum += stats[2 * s + 1] * w[s];
        }
        float inv = sum > 0f ? 1f / sum : 0f;
        for (int d = 0; d < D; d++) {
          float acc = 0f;
          for (int s = 0; s < splits; s++) {
            acc += parts[s * D + d] * w[s];
          }
          o[d] = acc * inv;
        }
        type.fromFloats(o, 0, h, 0, D);
        memory.putShorts(out + 2L * mh * D, h, 0, D);
      }
    }
  }

  /** {@code llama_swiglu(gu, y, M, I, bf16)}: {@code y = T((g / (1 + exp(-g))) * u)}. */
  public static final class Swiglu implements SimKernel {
    @Override
    public String entry() {
      return LlamaKernels.SWIGLU;
    }

    @Override
    public void launch(SimLaunch launch) {
      long gu = launch.pointer(0);
      long y = launch.pointer(1);
      int M = launch.intArg(2);
      int I = launch.intArg(3);
      HalfType type = HalfType.ofFlag(launch.intArg(4));
      DeviceMemory memory = launch.memory();
      short[] row = new short[2 * I];
      short[] out = new short[I];
      for (int m = 0; m < M; m++) {
        memory.getShorts(gu + 4L * m * I, row, 0, 2 * I);
        for (int i = 0; i < I; i++) {
          out[i] = type.fromFloat(silu(type.toFloat(row[i])) * type.toFloat(row[I + i]));
        }
        memory.putShorts(y + 2L * m * I, out, 0, I);
      }
    }
  }

  /** silu as llama.cu computes it: {@code g / (1 + exp(-g))} in fp32, exp taken in double. */
  public static float silu(float g) {
    return g / (1f + (float) Math.exp(-g));
  }

  /** {@code llama_argmax(logits, out, M, V)}: the rule of {@link ArgmaxSim}. */
  public static final class Argmax extends ArgmaxSim {
    public Argmax() {
      super(LlamaKernels.ARGMAX);
    }
  }

  // ---- shared ----

  static float[] halves(DeviceMemory memory, HalfType type, long address, int n) {
    short[] h = new short[n];
    memory.getShorts(address, h, 0, n);
    float[] f = new float[n];
    type.toFloats(h, 0, f, 0, n);
    return f;
  }

  static int[] ints(DeviceMemory memory, long address, int n) {
    int[] out = new int[n];
    memory.getInts(address, out, 0, n);
    return out;
  }
}
