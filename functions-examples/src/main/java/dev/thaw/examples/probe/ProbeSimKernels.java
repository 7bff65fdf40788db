package dev.thaw.examples.probe;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * The Java twin of {@code probe.ptx} for the simulated device (listed in {@code
 * META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}). Like the CUDA kernel it reads where it is told: an
 * unmapped address faults in the sim's checked {@link DeviceMemory}, which poisons the simulated device with
 * {@code CUDA_ERROR_ILLEGAL_ADDRESS}, as the GPU's MMU fault poisons a CUDA process; so does a store to memory
 * mapped read-only.
 */
public final class ProbeSimKernels {

  private ProbeSimKernels() {}

  /** {@code probe_read(const float* buf, long long offset, int count, float* out)}. */
  public static final class Read implements SimKernel {

    public static final String ENTRY = "probe_read";

    @Override
    public String entry() {
      return ENTRY;
    }

    /** Threads {@code t < min(count, grid.x * block.x)} copy {@code buf[offset + t]} to {@code out[t]}, in order. */
    @Override
    public void launch(SimLaunch launch) {
      long buf = launch.pointer(0);
      long offset = launch.longArg(1);
      int count = launch.intArg(2);
      long out = launch.pointer(3);
      long threads = (long) launch.grid().x() * launch.block().x();
      long n = Math.min(count, threads);
      DeviceMemory memory = launch.memory();
      for (long t = 0; t < n; t++) {
        memory.putFloat(out + 4 * t, memory.getFloat(buf + 4 * (offset + t)));
      }
    }
  }

  /** {@code probe_write(float* buf, long long offset, int count, float value)}. */
  public static final class Write implements SimKernel {

    public static final String ENTRY = "probe_write";

    @Override
    public String entry() {
      return ENTRY;
    }

    /** Threads {@code t < min(count, grid.x * block.x)} store {@code value} to {@code buf[offset + t]}, in order. */
    @Override
    public void launch(SimLaunch launch) {
      long buf = launch.pointer(0);
      long offset = launch.longArg(1);
      int count = launch.intArg(2);
      float value = launch.floatArg(3);
      long threads = (long) launch.grid().x() * launch.block().x();
      long n = Math.min(count, threads);
      DeviceMemory memory = launch.memory();
      for (long t = 0; t < n; t++) {
        memory.putFloat(buf + 4 * (offset + t), value);
      }
    }
  }
}
