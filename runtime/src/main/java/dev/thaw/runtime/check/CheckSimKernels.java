package dev.thaw.runtime.check;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;
import java.util.ServiceLoader;

/**
 * Java reference kernels that stand in for {@code check.ptx} on the simulated device, found by entry name
 * through {@link ServiceLoader} ({@code META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}).
 *
 * <p>All of this file's dependence on the sim SPI is here, on purpose: if that SPI changes, only this file does.
 * Each kernel computes the whole grid in one call. The CUDA kernels are grid-stride, so every element
 * {@code [0, n)} is covered by any launch; a non-positive {@code n} touches nothing.
 */
public final class CheckSimKernels {

  /** Elements moved between device memory and the heap at a time: bounds the heap a launch needs. */
  private static final int CHUNK = 1 << 16;

  private CheckSimKernels() {}

  /** {@code thaw_empty()}. */
  public static final class Empty implements SimKernel {
    @Override
    public String entry() {
      return CheckKernels.EMPTY;
    }

    @Override
    public void launch(SimLaunch launch) {}
  }

  /** {@code thaw_saxpy(float a, const float* x, float* y, int n)}. */
  public static final class Saxpy implements SimKernel {
    @Override
    public String entry() {
      return CheckKernels.SAXPY;
    }

    @Override
    public void launch(SimLaunch launch) {
      float a = launch.floatArg(0);
      long x = launch.longArg(1);
      long y = launch.longArg(2);
      int n = launch.intArg(3);
      DeviceMemory memory = launch.memory();
      float[] xs = new float[Math.min(Math.max(n, 0), CHUNK)];
      float[] ys = new float[xs.length];
      for (int start = 0; start < n; start += CHUNK) {
        int len = Math.min(CHUNK, n - start);
        long offset = 4L * start;
        memory.getFloats(x + offset, xs, 0, len);
        memory.getFloats(y + offset, ys, 0, len);
        for (int i = 0; i < len; i++) {
          ys[i] = CheckKernels.saxpy(a, xs[i], ys[i]);
        }
        memory.putFloats(y + offset, ys, 0, len);
      }
    }
  }

  /** {@code thaw_fill_u32(unsigned* p, unsigned v, int n)}. */
  public static final class FillU32 implements SimKernel {
    @Override
    public String entry() {
      return CheckKernels.FILL_U32;
    }

    @Override
    public void launch(SimLaunch launch) {
      long p = launch.longArg(0);
      int v = launch.intArg(1);
      int n = launch.intArg(2);
      DeviceMemory memory = launch.memory();
      float asFloat = Float.intBitsToFloat(v);
      if (Float.isNaN(asFloat)) {
        // A NaN's payload need not survive float conversions, so NaN patterns go word by word.
        for (int i = 0; i < n; i++) {
          memory.putInt(p + 4L * i, v);
        }
        return;
      }
      float[] values = new float[Math.min(Math.max(n, 0), CHUNK)];
      Arrays.fill(values, asFloat);
      for (int start = 0; start < n; start += CHUNK) {
        memory.putFloats(p + 4L * start, values, 0, Math.min(CHUNK, n - start));
      }
    }
  }
}
