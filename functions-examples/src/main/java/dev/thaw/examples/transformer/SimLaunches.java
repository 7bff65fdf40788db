package dev.thaw.examples.transformer;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/** Launch-shape rules the GPT-2 and Llama sim kernels share. */
public final class SimLaunches {

  private SimLaunches() {}

  /**
   * A kernel that is not grid-stride touches what its grid covers; its twin computes that only for the grid its
   * model's launcher uses, and refuses any other (failing the launch) rather than touch other bytes.
   */
  public static void expectShape(SimLaunch launch, int gridX, int gridY, int threads) {
    Dim3 g = launch.grid();
    Dim3 b = launch.block();
    if (g.x() != gridX || g.y() != gridY || g.z() != 1 || b.x() != threads || b.y() != 1 || b.z() != 1) {
      throw new IllegalArgumentException(String.format(
          "%s is written for grid (%d, %d, 1) x block (%d, 1, 1); launched as grid %s x block %s",
          launch.kernelName(), gridX, gridY, threads, g, b));
    }
  }

  public static int ceilDiv(int a, int b) {
    return (a + b - 1) / b;
  }
}
