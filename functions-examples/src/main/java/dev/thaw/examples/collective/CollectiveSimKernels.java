package dev.thaw.examples.collective;

import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * The Java twins of {@code collective.ptx} for the simulated device (listed in {@code
 * META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}): bit-exact (fp32 sums in the same order), touching exactly
 * the bytes the CUDA kernels touch. They read through the launching device's view of memory, so a peer's buffer that
 * was not granted to this device, or an address that is no rank's buffer, faults as it would on a GPU.
 */
public final class CollectiveSimKernels {

  /** Elements handled at once: bounds the host arrays, not what is touched. */
  private static final int CHUNK = 1 << 14;

  private CollectiveSimKernels() {}

  /** {@code thaw_allreduce_add(x, p0, p1, p2, p3, ranks, n, dtype)}. */
  public static final class AllReduceAdd implements SimKernel {
    @Override
    public String entry() {
      return CollectiveKernels.ALL_REDUCE_ADD;
    }

    @Override
    public void launch(SimLaunch launch) {
      long x = launch.pointer(0);
      int ranks = launch.intArg(5);
      long n = launch.longArg(6);
      PartialType type = PartialType.ofCode(launch.intArg(7));
      if (ranks < 1 || ranks > CollectiveKernels.MAX_RANKS || n < 0) {
        throw new IllegalArgumentException("thaw_allreduce_add: ranks " + ranks + ", n " + n);
      }
      long[] parts = new long[ranks];
      for (int r = 0; r < ranks; r++) {
        parts[r] = launch.pointer(1 + r);
      }
      DeviceMemory memory = launch.memory();
      long whole = n / CollectiveKernels.ALL_REDUCE_UNIT * CollectiveKernels.ALL_REDUCE_UNIT;
      float[] sum = new float[CHUNK];
      float[] part = new float[CHUNK];
      short[] halves = new short[CHUNK];
      for (long at = 0; at < whole; at += CHUNK) {
        int len = (int) Math.min(CHUNK, whole - at);
        read(memory, parts[0], at, len, type, sum, halves);
        for (int r = 1; r < ranks; r++) {
          read(memory, parts[r], at, len, type, part, halves);
          for (int i = 0; i < len; i++) {
            sum[i] += part[i];
          }
        }
        memory.getFloats(x + 4 * at, part, 0, len);
        for (int i = 0; i < len; i++) {
          part[i] += sum[i];
        }
        memory.putFloats(x + 4 * at, part, 0, len);
      }
    }

    private static void read(DeviceMemory memory, long base, long at, int len, PartialType type, float[] out,
        short[] halves) {
      if (type == PartialType.FLOAT32) {
        memory.getFloats(base + 4 * at, out, 0, len);
      } else {
        memory.getShorts(base + 2 * at, halves, 0, len);
        (type == PartialType.BFLOAT16 ? HalfType.BF16 : HalfType.FP16).toFloats(halves, 0, out, 0, len);
      }
    }
  }

  /** {@code thaw_allgather_columns(out, p0, p1, p2, p3, ranks, M, V)}. */
  public static final class AllGatherColumns implements SimKernel {
    @Override
    public String entry() {
      return CollectiveKernels.ALL_GATHER_COLUMNS;
    }

    @Override
    public void launch(SimLaunch launch) {
      long out = launch.pointer(0);
      int ranks = launch.intArg(5);
      int M = launch.intArg(6);
      int V = launch.intArg(7);
      if (ranks < 1 || ranks > CollectiveKernels.MAX_RANKS || M < 0 || V < 0) {
        throw new IllegalArgumentException("thaw_allgather_columns: ranks " + ranks + ", M " + M + ", V " + V);
      }
      DeviceMemory memory = launch.memory();
      float[] row = new float[V];
      for (int m = 0; m < M; m++) {
        for (int r = 0; r < ranks; r++) {
          int start = CollectiveKernels.sliceStart(V, r, ranks);
          int width = CollectiveKernels.sliceStart(V, r + 1, ranks) - start;
          memory.getFloats(launch.pointer(1 + r) + 4L * m * width, row, start, width);
        }
        memory.putFloats(out + 4L * m * V, row, 0, V);
      }
    }
  }
}
