package dev.thaw.runtime.gpu.cuda;

import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;

/** Placeholder until the CUDA binding lands; replaced on the cuda branch. */
public abstract class CudaDriver implements GpuDriver {
  public static DriverAvailability availability() {
    return DriverAvailability.no("the CUDA binding is not built yet");
  }

  public static CudaDriver open() {
    throw new IllegalStateException("the CUDA binding is not built yet");
  }
}
