package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.GpuDriver;

/** Placeholder until the simulated device lands; replaced on the sim branch. */
public abstract class SimDriver implements GpuDriver {
  public static SimDriver open(SimOptions options) {
    throw new IllegalStateException("the simulated device is not built yet");
  }
}
