package dev.thaw.examples.transformer;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * {@code <model>_argmax(logits, out, M, V)}, the twin of both models' argmax kernels: per row the index of the
 * largest value, the lowest index on ties (so {@code -0.0} and {@code 0.0} tie), NaN never wins, -1 when the whole
 * row is NaN. Exact: the CUDA kernels' comparison is a total order on (value, index), so their reduction order
 * cannot change the answer. Each model's subclass names its entry.
 */
public abstract class ArgmaxSim implements SimKernel {

  private final String entry;

  protected ArgmaxSim(String entry) {
    this.entry = entry;
  }

  @Override
  public final String entry() {
    return entry;
  }

  @Override
  public final void launch(SimLaunch launch) {
    long logits = launch.pointer(0);
    long out = launch.pointer(1);
    int M = launch.intArg(2);
    int V = launch.intArg(3);
    if (M <= 0) {
      return;
    }
    DeviceMemory memory = launch.memory();
    float[] row = new float[Math.max(V, 0)];
    int[] result = new int[M];
    for (int m = 0; m < M; m++) {
      memory.getFloats(logits + 4L * m * V, row, 0, row.length);
      result[m] = argmax(row, row.length);
    }
    memory.putInts(out, result, 0, M);
  }

  /** The kernels' rule: primitive comparisons, so NaN compares false and -0.0 == 0.0. */
  public static int argmax(float[] row, int len) {
    float best = Float.NEGATIVE_INFINITY;
    int bestIndex = Integer.MAX_VALUE;
    for (int v = 0; v < len; v++) {
      float x = row[v];
      if (x > best || (x == best && v < bestIndex)) {
        best = x;
        bestIndex = v;
      }
    }
    return bestIndex == Integer.MAX_VALUE ? -1 : bestIndex;
  }
}
