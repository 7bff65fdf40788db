package dev.thaw.examples.gpt2.kernels;

import static dev.thaw.examples.function.KernelLaunch.address;
import static dev.thaw.examples.function.KernelLaunch.aligned;
import static dev.thaw.examples.function.KernelLaunch.positive;

import dev.thaw.examples.function.KernelLaunch;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PtxResources;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The GPT-2 kernels of {@code gpt2.ptx} (source: {@code src/main/cuda/gpt2.cu}), one typed method per kernel.
 *
 * <p>Each method checks its shapes and alignments, then launches on {@code stream} with the grid and block the
 * kernel is written for. Arguments are device addresses ({@code long}) and sizes; the caller keeps the
 * buffers alive until the stream has run the launch. Half-precision tensors are IEEE binary16 ({@link Fp16}),
 * all matrices row-major; C = n_embd, H = heads, D = C / H, V = vocabulary, M = token rows in this call.
 * Contents are not checked: token ids, positions and cache rows must be in range (the kernels do not check
 * them either).
 *
 * <p>The hot path allocates nothing: each kernel has one pre-built {@link dev.thaw.runtime.gpu.KernelArgs} and a cached grid.
 * Hence <b>not thread-safe</b>: use one instance per context and launching thread.
 */
public final class Gpt2Kernels implements AutoCloseable {

  /** The classpath resource holding the module. */
  public static final String PTX_RESOURCE = "/dev/thaw/examples/gpt2/gpt2.ptx";

  public static final String EMBED = "gpt2_embed";
  public static final String LAYERNORM = "gpt2_layernorm";
  public static final String MATMUL = "gpt2_matmul";
  public static final String MATMUL_RESIDUAL = "gpt2_matmul_residual";
  public static final String KV_APPEND = "gpt2_kv_append";
  public static final String ATTENTION = "gpt2_attention";
  public static final String LM_HEAD = "gpt2_lm_head";
  public static final String ARGMAX = "gpt2_argmax";

  /** The longest context {@link #attention} supports (its scores live in shared memory). */
  public static final int MAX_CONTEXT = 1024;
  /** The largest head size {@link #attention} supports. */
  public static final int MAX_HEAD_SIZE = 128;
  /** Matmul tile edge: N, K (and C for {@link #lmHead}) must be multiples of it. */
  public static final int TILE = 16;
  /** Alignment, in bytes, of the operands read with 16-byte loads. */
  public static final int ALIGNMENT = 16;

  static final int MATMUL_THREADS = 256;
  static final int ATTENTION_THREADS = 128;
  static final int ROW_THREADS = 256;
  static final int ELEMENTWISE_THREADS = 256;
  /** Grid-stride kernels need no more blocks than this to fill a GPU. */
  static final int MAX_ELEMENTWISE_BLOCKS = 4096;
  /** gridDim.y and gridDim.z are at most 65535. */
  static final int MAX_GRID_Y = 65535;

  private final GpuModule module;
  private final boolean ownsModule;
  private final AtomicBoolean closed = new AtomicBoolean();
  private final KernelLaunch embed;
  private final KernelLaunch layernorm;
  private final KernelLaunch matmul;
  private final KernelLaunch matmulResidual;
  private final KernelLaunch kvAppend;
  private final KernelLaunch attention;
  private final KernelLaunch lmHead;
  private final KernelLaunch argmax;

  /** Uses kernels of a module loaded from {@link #ptx()} (or its cubin); the caller keeps and closes it. */
  public Gpt2Kernels(GpuModule module) {
    this(module, false);
  }

  private Gpt2Kernels(GpuModule module, boolean ownsModule) {
    this.module = module;
    this.ownsModule = ownsModule;
    this.embed = new KernelLaunch(module.kernel(EMBED), ELEMENTWISE_THREADS);
    this.layernorm = new KernelLaunch(module.kernel(LAYERNORM), ROW_THREADS);
    this.matmul = new KernelLaunch(module.kernel(MATMUL), MATMUL_THREADS);
    this.matmulResidual = new KernelLaunch(module.kernel(MATMUL_RESIDUAL), MATMUL_THREADS);
    this.kvAppend = new KernelLaunch(module.kernel(KV_APPEND), ELEMENTWISE_THREADS);
    this.attention = new KernelLaunch(module.kernel(ATTENTION), ATTENTION_THREADS);
    this.lmHead = new KernelLaunch(module.kernel(LM_HEAD), MATMUL_THREADS);
    this.argmax = new KernelLaunch(module.kernel(ARGMAX), ROW_THREADS);
  }

  /** Loads {@link #ptx()} into {@code context}; {@link #close()} unloads it. */
  public static Gpt2Kernels load(GpuContext context) {
    GpuModule module = context.loadPtx(ptx());
    try {
      return new Gpt2Kernels(module, true);
    } catch (RuntimeException e) {
      module.close();
      throw e;
    }
  }

  /** The module's PTX text. */
  public static String ptx() {
    return PtxResources.read(Gpt2Kernels.class, PTX_RESOURCE);
  }

  public GpuModule module() {
    return module;
  }

  /** {@code x[m,c] = float(wte[tokens[m],c]) + float(wpe[positions[m],c])}; x is fp32 [M, C]. */
  public void embed(GpuStream stream, long wte, long wpe, long tokens, long positions, long x, int M, int C) {
    positive("M", M);
    positive("C", C);
    address("wte", wte);
    address("wpe", wpe);
    address("tokens", tokens);
    address("positions", positions);
    address("x", x);
    embed.args().set(0, wte).set(1, wpe).set(2, tokens).set(3, positions).set(4, x).set(5, M).set(6, C);
    embed.launch(stream, elementwiseBlocks((long) M * C), 1);
  }

  /**
   * Per row of fp32 x [M, C]: {@code y = half((x - mean) * rsqrt(var + eps) * gamma + beta)}, mean and biased
   * variance in fp32 (two passes).
   */
  public void layernorm(GpuStream stream, long x, long gamma, long beta, long y, int M, int C, float eps) {
    positive("M", M);
    positive("C", C);
    address("x", x);
    address("gamma", gamma);
    address("beta", beta);
    address("y", y);
    if (!(eps >= 0f) || Float.isInfinite(eps)) {
      throw new IllegalArgumentException("eps must be finite and not negative: " + eps);
    }
    layernorm.args().set(0, x).set(1, gamma).set(2, beta).set(3, y).set(4, M).set(5, C).set(6, eps);
    layernorm.launch(stream, M, 1);
  }

  /**
   * {@code Y[m,n] = half(act(sum_k X[m,k] * W[k,n] + bias[n]))} on the tensor cores, fp32 accumulation; X is
   * [M, K], W is [K, N] (Conv1D layout), Y is [M, N]; {@code act} is GELU (tanh approximation, "gelu_new")
   * when {@code gelu}, else the identity.
   *
   * @throws IllegalArgumentException unless N and K are positive multiples of 16, M is positive, and X and W
   *     are 16-byte aligned
   */
  public void matmul(GpuStream stream, long X, long W, long bias, long Y, int M, int N, int K, boolean gelu) {
    checkMatmul(X, W, bias, Y, "Y", M, N, K);
    matmul.args().set(0, X).set(1, W).set(2, bias).set(3, Y).set(4, M).set(5, N).set(6, K).set(7, gelu ? 1 : 0);
    matmul.launch(stream, N / TILE, rowTiles(M));
  }

  /** {@code R[m,n] += sum_k X[m,k] * W[k,n] + bias[n]} into the fp32 residual stream R [M, N]; as {@link #matmul}. */
  public void matmulResidual(GpuStream stream, long X, long W, long bias, long R, int M, int N, int K) {
    checkMatmul(X, W, bias, R, "R", M, N, K);
    matmulResidual.args().set(0, X).set(1, W).set(2, bias).set(3, R).set(4, M).set(5, N).set(6, K);
    matmulResidual.launch(stream, N / TILE, rowTiles(M));
  }

  /**
   * Writes each row's k and v (columns [C, 2C) and [2C, 3C) of qkv [M, 3C]) into
   * {@code kcache/vcache[cacheRows[m], h, positions[m], :]}; caches are [B, H, maxT, D].
   */
  public void kvAppend(GpuStream stream, long qkv, long kcache, long vcache, long positions, long cacheRows,
      int M, int H, int D, int maxT) {
    positive("M", M);
    positive("H", H);
    positive("D", D);
    positive("maxT", maxT);
    address("qkv", qkv);
    address("kcache", kcache);
    address("vcache", vcache);
    address("positions", positions);
    address("cacheRows", cacheRows);
    int C = embedding(H, D);
    kvAppend.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, positions).set(4, cacheRows)
        .set(5, M).set(6, H).set(7, D).set(8, maxT);
    kvAppend.launch(stream, elementwiseBlocks((long) M * C), 1);
  }

  /**
   * Causal attention of each row m and head h over cache positions {@code 0..positions[m]}: scores
   * {@code scale * q.k} in fp32, softmax in fp32, {@code out[m, h*D + d] = half(sum_j p_j v_j[d])}. q comes
   * from columns [0, C) of qkv [M, 3C]; k and v from the caches, so {@link #kvAppend} runs first.
   *
   * @throws IllegalArgumentException unless D is a multiple of 8 and at most 128, maxT is at most 1024, M is at
   *     most 65535, and qkv and the caches are 16-byte aligned
   */
  public void attention(GpuStream stream, long qkv, long kcache, long vcache, long out, long positions,
      long cacheRows, int M, int H, int D, int maxT, float scale) {
    positive("M", M);
    positive("H", H);
    positive("D", D);
    positive("maxT", maxT);
    if (M > MAX_GRID_Y) {
      throw new IllegalArgumentException("M must be at most " + MAX_GRID_Y + ": " + M);
    }
    if (D % 8 != 0 || D > MAX_HEAD_SIZE) {
      throw new IllegalArgumentException("D must be a multiple of 8 and at most " + MAX_HEAD_SIZE + ": " + D);
    }
    if (maxT > MAX_CONTEXT) {
      throw new IllegalArgumentException("maxT must be at most " + MAX_CONTEXT + ": " + maxT);
    }
    if (!Float.isFinite(scale)) {
      throw new IllegalArgumentException("scale must be finite: " + scale);
    }
    aligned("qkv", qkv, ALIGNMENT);
    aligned("kcache", kcache, ALIGNMENT);
    aligned("vcache", vcache, ALIGNMENT);
    address("out", out);
    address("positions", positions);
    address("cacheRows", cacheRows);
    embedding(H, D);
    attention.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, out).set(4, positions).set(5, cacheRows)
        .set(6, M).set(7, H).set(8, D).set(9, maxT).set(10, scale);
    attention.launch(stream, H, M);
  }

  /**
   * {@code logits[m,v] = sum_c X[m,c] * wte[v,c]} (tied embedding, wte is [V, C]), fp32 out, on the tensor
   * cores.
   *
   * @throws IllegalArgumentException unless C is a positive multiple of 16, V and M are positive, and X and
   *     wte are 16-byte aligned
   */
  public void lmHead(GpuStream stream, long X, long wte, long logits, int M, int V, int C) {
    positive("M", M);
    positive("V", V);
    multipleOfTile("C", C);
    aligned("X", X, ALIGNMENT);
    aligned("wte", wte, ALIGNMENT);
    address("logits", logits);
    lmHead.args().set(0, X).set(1, wte).set(2, logits).set(3, M).set(4, V).set(5, C);
    lmHead.launch(stream, (V + TILE - 1) / TILE, rowTiles(M));
  }

  /**
   * {@code out[m]} = the index of the largest of row m of logits [M, V], the lowest on ties; NaN never wins;
   * -1 when the whole row is NaN.
   */
  public void argmax(GpuStream stream, long logits, long out, int M, int V) {
    positive("M", M);
    positive("V", V);
    address("logits", logits);
    address("out", out);
    argmax.args().set(0, logits).set(1, out).set(2, M).set(3, V);
    argmax.launch(stream, M, 1);
  }

  /** Unloads the module if {@link #load} loaded it. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true) && ownsModule) {
      module.close();
    }
  }

  // ---- checks ----

  private static void checkMatmul(long X, long W, long bias, long out, String outName, int M, int N, int K) {
    positive("M", M);
    multipleOfTile("N", N);
    multipleOfTile("K", K);
    aligned("X", X, ALIGNMENT);
    aligned("W", W, ALIGNMENT);
    address("bias", bias);
    address(outName, out);
    rowTiles(M);
  }

  private static int rowTiles(int M) {
    int tiles = (M + TILE - 1) / TILE;
    if (tiles > MAX_GRID_Y) {
      throw new IllegalArgumentException("M must be at most " + (long) MAX_GRID_Y * TILE + ": " + M);
    }
    return tiles;
  }

  private static int elementwiseBlocks(long elements) {
    return (int) Math.min((elements + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS, MAX_ELEMENTWISE_BLOCKS);
  }

  private static int embedding(int H, int D) {
    long C = (long) H * D;
    if (C * 3 > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("H * D is too large: " + H + " * " + D);
    }
    return (int) C;
  }

  private static void multipleOfTile(String name, int value) {
    if (value <= 0 || value % TILE != 0) {
      throw new IllegalArgumentException(name + " must be a positive multiple of " + TILE + ": " + value);
    }
  }
}
