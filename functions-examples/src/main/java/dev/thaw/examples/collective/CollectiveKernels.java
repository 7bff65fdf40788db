package dev.thaw.examples.collective;

import static dev.thaw.examples.function.KernelLaunch.aligned;
import static dev.thaw.examples.function.KernelLaunch.positive;

import dev.thaw.examples.function.KernelLaunch;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PtxResources;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The kernels of {@code collective.ptx} (source: {@code src/main/cuda/collective.cu}) for one rank: each reads every
 * rank's buffer, its peers' through peer mappings, and writes the whole result into this rank's memory.
 *
 * <p>Nothing here orders the reads after the peers' writes: {@link PeerGroup} does, with events. Arguments are
 * checked before anything is launched. One pre-built argument slab per kernel: <b>not thread-safe</b>, one instance
 * per rank and issuing thread.
 */
public final class CollectiveKernels implements AutoCloseable {

  public static final String PTX_RESOURCE = "/dev/thaw/examples/collective/collective.ptx";
  public static final String ALL_REDUCE_ADD = "thaw_allreduce_add";
  public static final String ALL_GATHER_COLUMNS = "thaw_allgather_columns";
  public static final List<String> ENTRIES = List.of(ALL_REDUCE_ADD, ALL_GATHER_COLUMNS);
  /** The most ranks one launch reads: the kernels take that many pointers. */
  public static final int MAX_RANKS = 4;
  /** Elements a thread of the all-reduce moves: n must be a multiple of it. */
  public static final int ALL_REDUCE_UNIT = 8;

  static final int THREADS = 256;
  /** Grid-stride kernels need no more blocks than this to keep the links busy. */
  static final int MAX_BLOCKS = 1024;

  private final GpuModule module;
  private final boolean ownsModule;
  private final KernelLaunch allReduceAdd;
  private final KernelLaunch allGatherColumns;
  private final AtomicBoolean closed = new AtomicBoolean();

  /** Uses kernels of a module loaded from {@link #ptx()} (or its cubin); the caller keeps and closes it. */
  public CollectiveKernels(GpuModule module) {
    this(module, false);
  }

  private CollectiveKernels(GpuModule module, boolean ownsModule) {
    this.module = module;
    this.ownsModule = ownsModule;
    this.allReduceAdd = new KernelLaunch(module.kernel(ALL_REDUCE_ADD), THREADS);
    this.allGatherColumns = new KernelLaunch(module.kernel(ALL_GATHER_COLUMNS), THREADS);
  }

  /** Loads {@link #ptx()} into {@code context}; {@link #close()} unloads it. */
  public static CollectiveKernels load(GpuContext context) {
    GpuModule module = context.loadPtx(ptx());
    try {
      return new CollectiveKernels(module, true);
    } catch (RuntimeException e) {
      module.close();
      throw e;
    }
  }

  /** The module's PTX text (compute_80: the driver JIT-compiles it for any newer GPU). */
  public static String ptx() {
    return PtxResources.read(CollectiveKernels.class, PTX_RESOURCE);
  }

  public GpuModule module() {
    return module;
  }

  /**
   * {@code x[i] += ((p[0][i] + p[1][i]) + p[2][i]) + p[3][i]} over the first {@code ranks} partials, i in [0, n),
   * summed in fp32 in rank order: every rank that runs it over the same partials gets the same bits.
   *
   * @param x fp32 [n], this rank's memory
   * @param partials one address per rank, each {@code n} elements of {@code type}, readable by this rank's device
   * @throws IllegalArgumentException unless 1 ≤ ranks ≤ {@link #MAX_RANKS} ≤ partials.length, n is a positive
   *     multiple of {@link #ALL_REDUCE_UNIT}, and x and the partials are 16-byte aligned
   */
  public void allReduceAdd(GpuStream stream, long x, long[] partials, int ranks, long n, PartialType type) {
    checkRanks(partials, ranks);
    if (n <= 0 || n % ALL_REDUCE_UNIT != 0) {
      throw new IllegalArgumentException("n must be a positive multiple of " + ALL_REDUCE_UNIT + ": " + n);
    }
    aligned("x", x, 16);
    for (int r = 0; r < ranks; r++) {
      aligned("partial of rank " + r, partials[r], 16);
    }
    allReduceAdd.args().set(0, x).set(1, partials[0]).set(2, pointer(partials, 1, ranks))
        .set(3, pointer(partials, 2, ranks)).set(4, pointer(partials, 3, ranks)).set(5, ranks).set(6, n)
        .set(7, type.code());
    allReduceAdd.launch(stream, blocks(n / ALL_REDUCE_UNIT), 1);
  }

  /**
   * {@code out} [M, V] fp32 from the ranks' column slices: rank r's slice is columns {@link #sliceStart}(V, r,
   * ranks) to {@code sliceStart(V, r + 1, ranks)}, a row-major [M, width] fp32 matrix at {@code slices[r]}.
   *
   * @throws IllegalArgumentException unless 1 ≤ ranks ≤ {@link #MAX_RANKS} ≤ slices.length, M and V are
   *     positive, V ≥ ranks, and the addresses are 4-byte aligned
   */
  public void allGatherColumns(GpuStream stream, long out, long[] slices, int ranks, int M, int V) {
    checkRanks(slices, ranks);
    positive("M", M);
    positive("V", V);
    if (V < ranks) {
      throw new IllegalArgumentException("V " + V + " leaves a rank of " + ranks + " no column");
    }
    aligned("out", out, 4);
    for (int r = 0; r < ranks; r++) {
      aligned("slice of rank " + r, slices[r], 4);
    }
    allGatherColumns.args().set(0, out).set(1, slices[0]).set(2, pointer(slices, 1, ranks))
        .set(3, pointer(slices, 2, ranks)).set(4, pointer(slices, 3, ranks)).set(5, ranks).set(6, M).set(7, V);
    allGatherColumns.launch(stream, blocks((long) M * V), 1);
  }

  /** The first column of rank {@code rank}'s slice of {@code V} columns split over {@code ranks}. */
  public static int sliceStart(int V, int rank, int ranks) {
    return (int) ((long) V * rank / ranks);
  }

  private static long pointer(long[] addresses, int rank, int ranks) {
    return rank < ranks ? addresses[rank] : 0L;
  }

  private static void checkRanks(long[] addresses, int ranks) {
    if (ranks < 1 || ranks > MAX_RANKS || ranks > addresses.length) {
      throw new IllegalArgumentException("ranks must be 1.." + Math.min(MAX_RANKS, addresses.length) + ": "
          + ranks);
    }
  }

  private static int blocks(long units) {
    return (int) Math.max(1, Math.min((units + THREADS - 1) / THREADS, MAX_BLOCKS));
  }

  /** Unloads the module if {@link #load} loaded it. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true) && ownsModule) {
      module.close();
    }
  }
}
