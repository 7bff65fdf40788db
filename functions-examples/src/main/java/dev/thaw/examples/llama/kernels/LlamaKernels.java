package dev.thaw.examples.llama.kernels;

import static dev.thaw.examples.function.KernelLaunch.address;
import static dev.thaw.examples.function.KernelLaunch.aligned;
import static dev.thaw.examples.function.KernelLaunch.positive;

import dev.thaw.examples.function.KernelLaunch;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The Llama-family kernels of {@code llama.ptx} (source: {@code src/main/cuda/llama.cu}), one typed method per
 * kernel, for one {@link HalfType}.
 *
 * <p>Each method checks its shapes and alignments, then launches on {@code stream} with the grid and block the
 * kernel is written for. Arguments are device addresses ({@code long}) and sizes; the caller keeps the buffers
 * alive until the stream has run the launch. Linear weights are W [N, K] as Hugging Face stores them, so a
 * product is {@code X W^T}. Contents are not checked: positions and cache rows must be in range (token ids
 * outside the vocabulary embed as zeros).
 *
 * <p>The hot path allocates nothing: each kernel has one pre-built {@link dev.thaw.runtime.gpu.KernelArgs} and a cached grid. Hence
 * <b>not thread-safe</b>: use one instance per context and launching thread.
 */
public final class LlamaKernels implements AutoCloseable {

  /** The classpath resource holding the module: compute_80 PTX, which the driver JIT-compiles for any newer GPU. */
  public static final String PTX_RESOURCE = "/dev/thaw/examples/llama/llama.ptx";
  /**
   * The same source built for sm_90a: every kernel of {@link #PTX_RESOURCE} plus the wgmma products
   * ({@link GemmTile#wgmma()}); architecture-specific, so the driver loads it on compute capability 9.0 only.
   */
  public static final String HOPPER_PTX_RESOURCE = "/dev/thaw/examples/llama/llama_sm90a.ptx";

  public static final String EMBED = "llama_embed";
  public static final String RMSNORM = "llama_rmsnorm";
  public static final String GEMV = "llama_gemv";
  /** {@link #GEMV} for one row: its own entry, with the registers of one accumulator. */
  public static final String GEMV1 = "llama_gemv1";
  public static final String MATMUL = "llama_matmul";
  public static final String ROPE_KV = "llama_rope_kv";
  public static final String ATTENTION = "llama_attention";
  public static final String SWIGLU = "llama_swiglu";
  public static final String ARGMAX = "llama_argmax";
  public static final String FLASH_ATTENTION = "llama_flash_attention";
  /** {@link #FLASH_ATTENTION} with 128 query rows per block: half the K/V traffic of long prompts. */
  public static final String FLASH_ATTENTION_WIDE = "llama_flash_attention_128";
  public static final String FLASH_DECODE = "llama_flash_decode";
  public static final String FLASH_COMBINE = "llama_flash_combine";
  /** Every entry of the module; the sm_90a module has these and {@link #HOPPER_ENTRIES}. */
  public static final List<String> ENTRIES = List.of(EMBED, RMSNORM, GEMV, GEMV1, MATMUL, ROPE_KV, ATTENTION,
      SWIGLU, ARGMAX, GemmTile.LARGE.entry, GemmTile.MEDIUM.entry, GemmTile.SMALL.entry, FLASH_ATTENTION,
      FLASH_ATTENTION_WIDE, FLASH_DECODE, FLASH_COMBINE);
  /** The entries only the sm_90a module has: the wgmma products. */
  public static final List<String> HOPPER_ENTRIES = List.of(GemmTile.WGMMA_LARGE.entry,
      GemmTile.WGMMA_MEDIUM.entry, GemmTile.WGMMA_SMALL.entry);
  /** Streaming multiprocessors assumed when the device is not known (an H100/H200 has 132). */
  public static final int DEFAULT_MULTIPROCESSORS = 132;

  /** The longest context {@link #attention} supports (its scores live in shared memory). */
  public static final int MAX_CONTEXT = 4096;
  /** The head sizes {@link #flashAttention} is built for. */
  public static final List<Integer> FLASH_HEAD_SIZES = List.of(64, 128);
  /** The most key ranges {@link #flashDecode} splits a row into. */
  public static final int MAX_SPLITS = 128;
  /** The largest head size {@link #attention} supports. */
  public static final int MAX_HEAD_SIZE = 256;
  /** The most rows {@link #gemv} takes; {@link #linear} uses the tensor-core {@link #matmul} above it. */
  public static final int GEMV_MAX_ROWS = 8;
  /** K of a matmul must be a multiple of this (the tensor-core kernel's K step). */
  public static final int K_MULTIPLE = 32;
  /** Alignment, in bytes, of the operands read with 16-byte loads. */
  public static final int ALIGNMENT = 16;

  static final int GEMV_COLUMNS = 8;
  static final int GEMV_THREADS = 256;
  static final int MATMUL_TILE = 64;
  static final int MATMUL_THREADS = 128;
  static final int ATTENTION_THREADS = 128;
  static final int FLASH_ROWS = 64;
  static final int FLASH_THREADS = 128;
  static final int FLASH_WIDE_ROWS = 128;
  static final int FLASH_WIDE_THREADS = 256;
  /**
   * Prompt rows from which {@link #flashAttention} runs {@link #FLASH_ATTENTION_WIDE}: one block of 8 warps per SM
   * pays off where the K/V traffic of 64-row blocks is what limits (thousands of keys per row);
   * {@code kernels-run.sh} times both at each length.
   */
  public static final int FLASH_WIDE_FROM_ROWS = 4096;
  /** Query heads per llama_flash_decode block. */
  static final int DECODE_HEADS = 4;
  static final int DECODE_THREADS = 128;
  /** llama_flash_decode blocks a decode step aims for: two per SM of a 132-SM H100/H200. */
  static final int DECODE_TARGET_BLOCKS = 264;
  /** Fewest keys per llama_flash_decode range when splitting further would only add blocks. */
  static final int DECODE_MIN_KEYS = 32;
  /**
   * Most keys per range on long contexts: each block holds few loads in flight (a piece of 256 keys between
   * barriers), so past two blocks per SM more ranges, not longer ones, keep HBM busy.
   */
  static final int DECODE_MAX_KEYS = 512;
  static final int ROW_THREADS = 256;
  /** argmax scans a whole vocabulary per row: the most threads a block has. */
  static final int ARGMAX_THREADS = 1024;
  static final int ELEMENTWISE_THREADS = 256;
  /** Grid-stride kernels need no more blocks than this to fill a GPU. */
  static final int MAX_ELEMENTWISE_BLOCKS = 4096;
  /** gridDim.y is at most 65535. */
  static final int MAX_GRID_Y = 65535;

  /** What a product does with its fp32 sums. */
  public enum Epilogue {
    /** {@code Y = T(acc + bias)} in the 16-bit type; bias optional. */
    STORE(0),
    /** {@code R = R + acc}: the fp32 residual stream. */
    RESIDUAL(1),
    /** {@code L = acc} in fp32: logits. */
    FLOAT(2),
    /**
     * {@code y = T(silu(T(g)) * T(u))}: W is gate | up ([N = 2I, K]), out [M, I]; the tensor-core {@link #gemm}
     * only.
     */
    SWIGLU(3);

    final int code;

    Epilogue(int code) {
      this.code = code;
    }

    static Epilogue of(int code) {
      for (Epilogue e : values()) {
        if (e.code == code) {
          return e;
        }
      }
      throw new IllegalArgumentException("no epilogue " + code);
    }
  }

  /**
   * The tensor-core products of {@code llama.cu}: {@code llama_gemm_<rows>x<columns>} on mma.sync (every
   * module), {@code llama_wgmma_<rows>x<columns>} on wgmma (the sm_90a module only). Each is the output tile of
   * one block, its threads and its dynamic shared memory; {@link GemmTiles} says which {@link #linear} launches.
   */
  public enum GemmTile {
    /** 32 x 32, 64 threads, 8 stages: tens of rows, where a product streams W and needs many blocks. */
    SMALL("llama_gemm_32x32", 32, 32, 64, 0),
    /** 64 x 64, 128 threads, 4 stages. */
    MEDIUM("llama_gemm_64x64", 64, 64, 128, 0),
    /** 128 x 128, 256 threads, 3 stages. */
    LARGE("llama_gemm_128x128", 128, 128, 256, 0),
    /** wgmma, one warpgroup of 64 x 128, 4 stages of 64-wide K, two blocks per SM. */
    WGMMA_SMALL("llama_wgmma_64x128", 64, 128, 128, 4),
    /** wgmma, two warpgroups of 64 x 128, 3 stages, two blocks per SM. */
    WGMMA_MEDIUM("llama_wgmma_128x128", 128, 128, 256, 3),
    /** wgmma, two warpgroups of 64 x 256, 4 stages, one block per SM: long prompts. */
    WGMMA_LARGE("llama_wgmma_128x256", 128, 256, 256, 4);

    final String entry;
    final int rows;
    final int columns;
    final int threads;
    final int stages;

    GemmTile(String entry, int rows, int columns, int threads, int stages) {
      this.entry = entry;
      this.rows = rows;
      this.columns = columns;
      this.threads = threads;
      this.stages = stages;
    }

    public String entry() {
      return entry;
    }

    /** By entry name. */
    public static GemmTile of(String entry) {
      for (GemmTile t : values()) {
        if (t.entry.equals(entry)) {
          return t;
        }
      }
      throw new IllegalArgumentException("no product tile '" + entry + "'");
    }

    /** Whether it is a wgmma product of the sm_90a module. */
    public boolean wgmma() {
      return stages > 0;
    }

    /**
     * Dynamic shared memory a launch asks for: the wgmma stages of (rows + columns) 128-byte rows and 1 KiB to
     * align them; the mma.sync tiles use static shared memory.
     */
    public int sharedBytes() {
      return wgmma() ? stages * (rows + columns) * 128 + 1024 : 0;
    }

    /** Output column tiles of a product: SwiGLU tiles cover columns/2 outputs. */
    int columnTiles(int N, Epilogue e) {
      return e == Epilogue.SWIGLU ? (N / 2 + columns / 2 - 1) / (columns / 2) : (N + columns - 1) / columns;
    }

    int rowTiles(int M) {
      return (M + rows - 1) / rows;
    }

    /** Blocks of a product: row tiles times column tiles. */
    public long blocks(int M, int N, Epilogue e) {
      return (long) rowTiles(M) * columnTiles(N, e);
    }
  }

  private final GpuModule module;
  private final HalfType type;
  private final boolean ownsModule;
  private final AtomicBoolean closed = new AtomicBoolean();
  private final KernelLaunch embed;
  private final KernelLaunch rmsnorm;
  private final KernelLaunch gemv;
  private final KernelLaunch gemv1;
  private final KernelLaunch matmul;
  private final KernelLaunch ropeKv;
  private final KernelLaunch attention;
  private final KernelLaunch swiglu;
  private final KernelLaunch argmax;
  private final KernelLaunch[] gemms = new KernelLaunch[GemmTile.values().length];
  private final boolean wgmma;
  private final int multiprocessors;
  private final GemmTiles tiles;
  private final KernelLaunch flashAttention;
  private final KernelLaunch flashAttentionWide;
  private final KernelLaunch flashDecode;
  private final KernelLaunch flashCombine;

  /**
   * Uses kernels of a module loaded from {@link #ptx()} or {@link #ptx(DeviceInfo)} (or its cubin), the wgmma
   * products if it has them; the caller keeps and closes it. Tiles are picked for a 132-SM device.
   */
  public LlamaKernels(GpuModule module, HalfType type) {
    this(module, type, null, false);
  }

  /**
   * As {@link #LlamaKernels(GpuModule, HalfType)} on {@code device}: the wgmma products only on compute
   * capability 9.0 (a module without them, e.g. of an image made before they existed, runs mma.sync tiles), and
   * tiles picked for its SM count.
   */
  public LlamaKernels(GpuModule module, HalfType type, DeviceInfo device) {
    this(module, type, device, false);
  }

  private LlamaKernels(GpuModule module, HalfType type, DeviceInfo device, boolean ownsModule) {
    this.module = module;
    this.type = type;
    this.ownsModule = ownsModule;
    this.multiprocessors = device != null ? device.multiprocessorCount() : DEFAULT_MULTIPROCESSORS;
    this.embed = new KernelLaunch(module.kernel(EMBED), ELEMENTWISE_THREADS);
    this.rmsnorm = new KernelLaunch(module.kernel(RMSNORM), ROW_THREADS);
    this.gemv = new KernelLaunch(module.kernel(GEMV), GEMV_THREADS);
    this.gemv1 = new KernelLaunch(module.kernel(GEMV1), GEMV_THREADS);
    this.matmul = new KernelLaunch(module.kernel(MATMUL), MATMUL_THREADS);
    this.ropeKv = new KernelLaunch(module.kernel(ROPE_KV), ELEMENTWISE_THREADS);
    this.attention = new KernelLaunch(module.kernel(ATTENTION), ATTENTION_THREADS);
    this.swiglu = new KernelLaunch(module.kernel(SWIGLU), ELEMENTWISE_THREADS);
    this.argmax = new KernelLaunch(module.kernel(ARGMAX), ARGMAX_THREADS);
    this.wgmma = (device == null || hopper(device)) && hasEntries(module, HOPPER_ENTRIES);
    for (GemmTile t : GemmTile.values()) {
      if (t.wgmma() && !wgmma) {
        continue;
      }
      Kernel k = module.kernel(t.entry);
      if (t.sharedBytes() > Kernel.DEFAULT_MAX_DYNAMIC_SHARED_MEMORY) {
        k.setMaxDynamicSharedMemory(t.sharedBytes());
      }
      gemms[t.ordinal()] = new KernelLaunch(k, t.threads, t.sharedBytes());
    }
    this.tiles = GemmTiles.defaults(wgmma);
    this.flashAttention = new KernelLaunch(module.kernel(FLASH_ATTENTION), FLASH_THREADS);
    this.flashAttentionWide = new KernelLaunch(module.kernel(FLASH_ATTENTION_WIDE), FLASH_WIDE_THREADS);
    this.flashDecode = new KernelLaunch(module.kernel(FLASH_DECODE), DECODE_THREADS);
    this.flashCombine = new KernelLaunch(module.kernel(FLASH_COMBINE), DECODE_THREADS);
  }

  /** Loads {@link #ptx(DeviceInfo)} for the context's device; {@link #close()} unloads it. */
  public static LlamaKernels load(GpuContext context, HalfType type) {
    return load(context, type, ptx(context.device()));
  }

  /** Loads {@code ptx} (one of the two builds) into {@code context}; {@link #close()} unloads it. */
  public static LlamaKernels load(GpuContext context, HalfType type, String ptx) {
    GpuModule module = context.loadPtx(ptx);
    try {
      return new LlamaKernels(module, type, context.device(), true);
    } catch (RuntimeException e) {
      module.close();
      throw e;
    }
  }

  /** Whether {@code device} runs the sm_90a module: compute capability 9.0 (H100, H200, GH200). */
  public static boolean hopper(DeviceInfo device) {
    return device.computeCapabilityMajor() == 9 && device.computeCapabilityMinor() == 0;
  }

  /**
   * The module's PTX for {@code device}: {@link #HOPPER_PTX_RESOURCE} on compute capability 9.0, else
   * {@link #ptx()}.
   */
  public static String ptx(DeviceInfo device) {
    return hopper(device) ? hopperPtx() : ptx();
  }

  /** The compute_80 module's PTX text ({@link #PTX_RESOURCE}). */
  public static String ptx() {
    return resource(PTX_RESOURCE);
  }

  /** The sm_90a module's PTX text ({@link #HOPPER_PTX_RESOURCE}). */
  public static String hopperPtx() {
    return resource(HOPPER_PTX_RESOURCE);
  }

  private static String resource(String name) {
    try (InputStream in = LlamaKernels.class.getResourceAsStream(name)) {
      if (in == null) {
        throw new IllegalStateException(name + " is missing from the classpath");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  public GpuModule module() {
    return module;
  }

  public HalfType type() {
    return type;
  }

  /** Whether this module has the wgmma products, and they are used. */
  public boolean wgmma() {
    return wgmma;
  }

  /** Which tile {@link #linear} launches for each product shape. */
  public GemmTiles tiles() {
    return tiles;
  }

  /** The tile {@link #linear} launches for M rows (above {@link #GEMV_MAX_ROWS}) of an N-column product. */
  public GemmTile tileFor(int M, int N, Epilogue e) {
    return tiles.pick(M, N, e, multiprocessors);
  }

  /** The product tiles this module can launch. */
  public List<GemmTile> gemmTiles() {
    List<GemmTile> out = new ArrayList<>();
    for (GemmTile t : GemmTile.values()) {
      if (gemms[t.ordinal()] != null) {
        out.add(t);
      }
    }
    return out;
  }

  /** {@code x[m,c] = float(table[tokens[m],c])}, x fp32 [M, C]; ids outside [0, V) give a row of zeros. */
  public void embed(GpuStream stream, long table, long tokens, long x, int M, int C, int V) {
    positive("M", M);
    positive("C", C);
    positive("V", V);
    address("table", table);
    address("tokens", tokens);
    address("x", x);
    embed.args().set(0, table).set(1, tokens).set(2, x).set(3, M).set(4, C).set(5, V).set(6, type.flag());
    embed.launch(stream, elementwiseBlocks((long) M * C), 1);
  }

  /** Per row of fp32 x [M, C]: {@code y = T(x * rsqrt(mean(x^2) + eps) * w)}. */
  public void rmsnorm(GpuStream stream, long x, long w, long y, int M, int C, float eps) {
    positive("M", M);
    positive("C", C);
    address("x", x);
    address("w", w);
    address("y", y);
    if (!(eps >= 0f) || Float.isInfinite(eps)) {
      throw new IllegalArgumentException("eps must be finite and not negative: " + eps);
    }
    rmsnorm.args().set(0, x).set(1, w).set(2, y).set(3, M).set(4, C).set(5, eps).set(6, type.flag());
    rmsnorm.launch(stream, M, 1);
  }

  /**
   * {@code out = epilogue(X W^T)}: {@link #gemv} for M up to {@link #GEMV_MAX_ROWS}, else the tensor-core
   * {@link #gemm} with the tile {@link #tileFor} picks. {@link Epilogue#SWIGLU} needs M above
   * {@link #GEMV_MAX_ROWS} (the gemv has no fused SwiGLU: use {@link #swiglu} after it).
   */
  public void linear(GpuStream stream, long X, long W, long bias, long out, int M, int N, int K, Epilogue e) {
    if (M <= GEMV_MAX_ROWS) {
      gemv(stream, X, W, bias, out, M, N, K, e);
    } else {
      gemm(stream, tileFor(M, N, e), X, W, bias, out, M, N, K, e);
    }
  }

  /**
   * {@code out = epilogue(X W^T)} on the tensor cores with one {@link GemmTile}: X [M, K], W [N, K], out [M, N]
   * (for {@link Epilogue#SWIGLU}: W gate | up [N = 2I, K], out [M, I]); {@code bias} [N] (0 for none) only with
   * {@link Epilogue#STORE}.
   *
   * @throws IllegalArgumentException unless M and N are positive (N even for SwiGLU), K a positive multiple of 32,
   *     X, W and out 16-byte aligned, and this module has the tile (the wgmma ones: the sm_90a module on 9.0)
   */
  public void gemm(GpuStream stream, GemmTile tile, long X, long W, long bias, long out, int M, int N, int K,
      Epilogue e) {
    KernelLaunch gemm = gemms[tile.ordinal()];
    if (gemm == null) {
      throw new IllegalArgumentException(tile.entry + " is a wgmma product: it needs the sm_90a module on a "
          + "compute capability 9.0 device");
    }
    positive("M", M);
    checkProduct(X, W, bias, out, N, K, K_MULTIPLE, e);
    aligned("out", out, ALIGNMENT);
    if (bias != 0) {
      aligned("bias", bias, ALIGNMENT);
    }
    if (e == Epilogue.SWIGLU && N % 2 != 0) {
      throw new IllegalArgumentException("N must be even (gate | up rows) for SWIGLU: " + N);
    }
    int rowTiles = tile.rowTiles(M);
    if (!tile.wgmma() && rowTiles > MAX_GRID_Y) {
      throw new IllegalArgumentException("M must be at most " + (long) MAX_GRID_Y * tile.rows + ": " + M);
    }
    gemm.args().set(0, X).set(1, W).set(2, bias).set(3, out).set(4, M).set(5, N).set(6, K).set(7, e.code)
        .set(8, bias != 0 ? 1 : 0).set(9, type.flag());
    if (tile.wgmma()) {
      long blocks = tile.blocks(M, N, e);
      if (blocks > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("M x N is too large for one launch: " + M + " x " + N);
      }
      gemm.launch(stream, (int) blocks, 1);
    } else {
      gemm.launch(stream, tile.columnTiles(N, e), rowTiles);
    }
  }

  /**
   * {@code out = epilogue(X W^T)} for 1..8 rows, streaming W with 16-byte loads ({@code llama_gemv1} for one row,
   * {@code llama_gemv} for more): X [M, K], W [N, K], out [M, N];
   * {@code bias} [N] (0 for none) only with {@link Epilogue#STORE}.
   *
   * @throws IllegalArgumentException unless M is 1..8, N is positive, K a positive multiple of 8, and X and W
   *     16-byte aligned
   */
  public void gemv(GpuStream stream, long X, long W, long bias, long out, int M, int N, int K, Epilogue e) {
    if (M <= 0 || M > GEMV_MAX_ROWS) {
      throw new IllegalArgumentException("M must be 1.." + GEMV_MAX_ROWS + " for gemv: " + M);
    }
    noSwiglu("gemv", e);
    checkProduct(X, W, bias, out, N, K, 8, e);
    KernelLaunch gemv = M == 1 ? gemv1 : this.gemv;
    gemv.args().set(0, X).set(1, W).set(2, bias).set(3, out).set(4, M).set(5, N).set(6, K).set(7, e.code)
        .set(8, bias != 0 ? 1 : 0).set(9, type.flag());
    gemv.launch(stream, (N + GEMV_COLUMNS - 1) / GEMV_COLUMNS, 1);
  }

  /**
   * {@code out = epilogue(X W^T)} on the tensor cores, as {@link #gemv} for any M; K a positive multiple of 32.
   */
  public void matmul(GpuStream stream, long X, long W, long bias, long out, int M, int N, int K, Epilogue e) {
    positive("M", M);
    noSwiglu("matmul", e);
    checkProduct(X, W, bias, out, N, K, K_MULTIPLE, e);
    int rowTiles = (M + MATMUL_TILE - 1) / MATMUL_TILE;
    if (rowTiles > MAX_GRID_Y) {
      throw new IllegalArgumentException("M must be at most " + (long) MAX_GRID_Y * MATMUL_TILE + ": " + M);
    }
    matmul.args().set(0, X).set(1, W).set(2, bias).set(3, out).set(4, M).set(5, N).set(6, K).set(7, e.code)
        .set(8, bias != 0 ? 1 : 0).set(9, type.flag());
    matmul.launch(stream, (N + MATMUL_TILE - 1) / MATMUL_TILE, rowTiles);
  }

  /**
   * Rotary embedding and KV-cache append: in each row of qkv [M, (Hq + 2 Hkv) D] rotates the Hq query heads in
   * place, writes the Hkv rotated key heads and the value heads to {@code kcache/vcache[cacheRows[m], kv,
   * positions[m], :]} (caches [B, Hkv, maxT, D]). Pair (d, d + D/2) turns by {@code positions[m] * invFreq[d]}
   * (fp32 [D/2]).
   */
  public void ropeKv(GpuStream stream, long qkv, long kcache, long vcache, long invFreq, long positions,
      long cacheRows, int M, int Hq, int Hkv, int D, int maxT) {
    checkHeads(M, Hq, Hkv, D, maxT, false);
    address("qkv", qkv);
    address("kcache", kcache);
    address("vcache", vcache);
    address("invFreq", invFreq);
    address("positions", positions);
    address("cacheRows", cacheRows);
    ropeKv.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, invFreq).set(4, positions).set(5, cacheRows)
        .set(6, M).set(7, Hq).set(8, Hkv).set(9, D).set(10, maxT).set(11, type.flag());
    ropeKv.launch(stream, elementwiseBlocks((long) M * (Hq + 2L * Hkv) * (D / 2)), 1);
  }

  /**
   * Causal grouped-query attention of each row m and query head h over cache positions
   * {@code 0..positions[m]} of key-value head {@code h / (Hq / Hkv)}: scores {@code scale * q.k} and softmax in
   * fp32, {@code out[m, h*D + d] = T(sum_t p_t v_t[d])}, out [M, Hq D]. q is head h of the qkv row (rotated by
   * {@link #ropeKv}, which also put the row's k and v in the cache: run it first).
   */
  public void attention(GpuStream stream, long qkv, long kcache, long vcache, long out, long positions,
      long cacheRows, int M, int Hq, int Hkv, int D, int maxT, float scale) {
    checkAttention(qkv, kcache, vcache, out, positions, cacheRows, M, Hq, Hkv, D, maxT, scale, true);
    if (M > MAX_GRID_Y) {
      throw new IllegalArgumentException("M must be at most " + MAX_GRID_Y + ": " + M);
    }
    attention.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, out).set(4, positions).set(5, cacheRows)
        .set(6, M).set(7, Hq).set(8, Hkv).set(9, D).set(10, maxT).set(11, scale).set(12, type.flag());
    attention.launch(stream, Hq, M);
  }

  /**
   * {@link #attention}'s function for a prompt pass on the tensor cores (FlashAttention-2: K/V tiles in shared
   * memory, online softmax), for any {@code positions[m] < maxT}: no {@link #MAX_CONTEXT} limit. D must be one of
   * {@link #FLASH_HEAD_SIZES}; qkv, the caches and out 16-byte aligned. Rows of one sequence should be
   * consecutive (the usual prompt layout): a tile of 64 (or 128) rows that spans k sequences makes k passes over
   * keys. {@link #FLASH_ATTENTION_WIDE} from {@link #FLASH_WIDE_FROM_ROWS} rows, else {@link #FLASH_ATTENTION}.
   */
  public void flashAttention(GpuStream stream, long qkv, long kcache, long vcache, long out, long positions,
      long cacheRows, int M, int Hq, int Hkv, int D, int maxT, float scale) {
    flashAttention(stream, M >= FLASH_WIDE_FROM_ROWS, qkv, kcache, vcache, out, positions, cacheRows, M, Hq, Hkv, D,
        maxT, scale);
  }

  /** {@link #flashAttention} with the entry given: {@link #FLASH_ATTENTION_WIDE} when {@code wide}. */
  public void flashAttention(GpuStream stream, boolean wide, long qkv, long kcache, long vcache, long out,
      long positions, long cacheRows, int M, int Hq, int Hkv, int D, int maxT, float scale) {
    checkAttention(qkv, kcache, vcache, out, positions, cacheRows, M, Hq, Hkv, D, maxT, scale, false);
    if (!FLASH_HEAD_SIZES.contains(D)) {
      throw new IllegalArgumentException("D must be one of " + FLASH_HEAD_SIZES + " for flash attention: " + D);
    }
    if (Hq > MAX_GRID_Y) {
      throw new IllegalArgumentException("Hq must be at most " + MAX_GRID_Y + ": " + Hq);
    }
    aligned("out", out, ALIGNMENT);
    KernelLaunch flash = wide ? flashAttentionWide : flashAttention;
    int rows = wide ? FLASH_WIDE_ROWS : FLASH_ROWS;
    flash.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, out).set(4, positions)
        .set(5, cacheRows).set(6, M).set(7, Hq).set(8, Hkv).set(9, D).set(10, maxT).set(11, scale)
        .set(12, type.flag());
    flash.launch(stream, (M + rows - 1) / rows, Hq);
  }

  /**
   * {@link #attention}'s function by split-KV (flash-decoding), for decode at any context: each row's keys are cut
   * into {@code splits} ranges, one block per (KV head, up to 4 of its query heads, row, range) writes an fp32
   * partial into {@code partial}, and a combine kernel rescales them into out [M, Hq D] in range order.
   *
   * @param partial fp32 scratch of at least {@link #decodePartialFloats} floats
   * @param splits 1..{@link #MAX_SPLITS}; any value gives the same function ({@link #decodeSplits} picks one that
   *     fills the GPU)
   */
  public void flashDecode(GpuStream stream, long qkv, long kcache, long vcache, long partial, long out,
      long positions, long cacheRows, int M, int Hq, int Hkv, int D, int maxT, float scale, int splits) {
    checkAttention(qkv, kcache, vcache, out, positions, cacheRows, M, Hq, Hkv, D, maxT, scale, false);
    aligned("partial", partial, ALIGNMENT);
    if (splits < 1 || splits > MAX_SPLITS) {
      throw new IllegalArgumentException("splits must be 1.." + MAX_SPLITS + ": " + splits);
    }
    if (M > MAX_GRID_Y || Hq > MAX_GRID_Y) {
      throw new IllegalArgumentException("M and Hq must be at most " + MAX_GRID_Y + ": " + M + ", " + Hq);
    }
    int group = Hq / Hkv;
    flashDecode.args().set(0, qkv).set(1, kcache).set(2, vcache).set(3, partial).set(4, positions)
        .set(5, cacheRows).set(6, M).set(7, Hq).set(8, Hkv).set(9, D).set(10, maxT).set(11, scale)
        .set(12, type.flag());
    flashDecode.launch(stream, Hkv * ((group + DECODE_HEADS - 1) / DECODE_HEADS), M, splits);
    flashCombine.args().set(0, partial).set(1, out).set(2, M).set(3, Hq).set(4, D).set(5, splits)
        .set(6, type.flag());
    flashCombine.launch(stream, Hq, M);
  }

  /** Floats of {@link #flashDecode}'s {@code partial} for M rows: [M, Hq, splits, D] of o, then (max, sum). */
  public static long decodePartialFloats(int M, int Hq, int D, int splits) {
    return (long) M * Hq * splits * (D + 2);
  }

  /**
   * The split count for {@link #flashDecode} when the longest row has {@code maxLen} keys: enough ranges for
   * about two blocks per SM and none longer than 512 keys, none shorter than 32, at most {@link #MAX_SPLITS}.
   */
  public static int decodeSplits(int maxLen, int M, int Hq, int Hkv) {
    long blocks = (long) Hkv * ((Hq / Hkv + DECODE_HEADS - 1) / DECODE_HEADS) * M;
    long want = Math.max((DECODE_TARGET_BLOCKS + blocks - 1) / blocks,
        ((long) maxLen + DECODE_MAX_KEYS - 1) / DECODE_MAX_KEYS);
    long most = Math.max(1, (maxLen + DECODE_MIN_KEYS - 1) / DECODE_MIN_KEYS);
    return (int) Math.max(1, Math.min(MAX_SPLITS, Math.min(want, most)));
  }

  /** {@code y[m,i] = T(silu(gu[m,i]) * gu[m,I+i])}: gu [M, 2I] is gate | up, y [M, I]. */
  public void swiglu(GpuStream stream, long gu, long y, int M, int I) {
    positive("M", M);
    positive("I", I);
    address("gu", gu);
    address("y", y);
    swiglu.args().set(0, gu).set(1, y).set(2, M).set(3, I).set(4, type.flag());
    swiglu.launch(stream, elementwiseBlocks((long) M * I), 1);
  }

  /**
   * {@code out[m]} = the index of the largest of row m of logits [M, V], the lowest on ties; NaN never wins; -1
   * when the whole row is NaN.
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

  private static void checkProduct(long X, long W, long bias, long out, int N, int K, int kMultiple, Epilogue e) {
    positive("N", N);
    if (K <= 0 || K % kMultiple != 0) {
      throw new IllegalArgumentException("K must be a positive multiple of " + kMultiple + ": " + K);
    }
    aligned("X", X, ALIGNMENT);
    aligned("W", W, ALIGNMENT);
    address("out", out);
    if (bias != 0 && e != Epilogue.STORE) {
      throw new IllegalArgumentException("a bias goes only with the STORE epilogue, not " + e);
    }
  }

  private static void noSwiglu(String kernel, Epilogue e) {
    if (e == Epilogue.SWIGLU) {
      throw new IllegalArgumentException(kernel + " has no SWIGLU epilogue: use gemm, or swiglu after STORE");
    }
  }

  private static void checkAttention(long qkv, long kcache, long vcache, long out, long positions,
      long cacheRows, int M, int Hq, int Hkv, int D, int maxT, float scale, boolean scoresInSharedMemory) {
    checkHeads(M, Hq, Hkv, D, maxT, scoresInSharedMemory);
    if (!Float.isFinite(scale)) {
      throw new IllegalArgumentException("scale must be finite: " + scale);
    }
    aligned("qkv", qkv, ALIGNMENT);
    aligned("kcache", kcache, ALIGNMENT);
    aligned("vcache", vcache, ALIGNMENT);
    address("out", out);
    address("positions", positions);
    address("cacheRows", cacheRows);
  }

  private static void checkHeads(int M, int Hq, int Hkv, int D, int maxT, boolean limitContext) {
    positive("M", M);
    positive("Hq", Hq);
    positive("Hkv", Hkv);
    positive("maxT", maxT);
    if (Hq % Hkv != 0) {
      throw new IllegalArgumentException("Hkv " + Hkv + " must divide Hq " + Hq);
    }
    if (D <= 0 || D % 8 != 0 || D > MAX_HEAD_SIZE) {
      throw new IllegalArgumentException("D must be a multiple of 8 and at most " + MAX_HEAD_SIZE + ": " + D);
    }
    if (limitContext && maxT > MAX_CONTEXT) {
      throw new IllegalArgumentException("maxT must be at most " + MAX_CONTEXT + ": " + maxT);
    }
    if ((long) (Hq + 2 * Hkv) * D > Integer.MAX_VALUE / 2) {
      throw new IllegalArgumentException("(Hq + 2 Hkv) D is too large");
    }
  }

  /** Whether every entry resolves in {@code module}: by its entry list when known, else by looking each up. */
  private static boolean hasEntries(GpuModule module, List<String> entries) {
    List<String> names = module.kernelNames();
    if (!names.isEmpty()) {
      return names.containsAll(entries);
    }
    try {
      for (String e : entries) {
        module.kernel(e);
      }
      return true;
    } catch (CudaException e) {
      if (e.code() == CudaError.CUDA_ERROR_NOT_FOUND) {
        return false;
      }
      throw e;
    }
  }

  private static int elementwiseBlocks(long elements) {
    return (int) Math.min((elements + ELEMENTWISE_THREADS - 1) / ELEMENTWISE_THREADS, MAX_ELEMENTWISE_BLOCKS);
  }
}
