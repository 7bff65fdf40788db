package dev.thaw.examples.mlp;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;

/**
 * Java twins of {@code mlp.ptx} for the simulated device, found by entry name through {@link
 * java.util.ServiceLoader} ({@code META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}).
 *
 * <p>All of this package's dependence on the sim SPI is here. The twins follow {@code mlp.cu}'s shape contract
 * (see its header): the same bytes read and written for the same arguments, whatever the grid.
 */
public final class MlpSimKernels {

  /** The one block shape {@code mlp_linear} computes with; any other block touches nothing. */
  public static final int LINEAR_THREADS = 128;
  /** Rows and columns of one {@code mlp_linear} output tile: the grid needs one block per tile for full speed. */
  public static final int LINEAR_TILE = 64;

  /** Floats held on the heap at a time per operand: bounds a launch's heap use for any shape. */
  private static final int CHUNK = 1 << 20;

  private MlpSimKernels() {}

  /**
   * {@code x} rounded to TF32 exactly as {@code cvt.rna.tf32.f32} does on sm_80/sm_90: to nearest, ties away
   * from zero, by adding half a TF32 unit to the magnitude bits and clearing the 13 low mantissa bits (a carry
   * into the exponent is the right answer, up to infinity). NaN stays NaN; the function never sends one.
   */
  static float tf32(float x) {
    if (Float.isNaN(x)) {
      return x;
    }
    return Float.intBitsToFloat((Float.floatToRawIntBits(x) + 0x1000) & 0xffffe000);
  }

  /** {@code mlp_linear(const float* x, const float* w, const float* b, float* y, int M, int N, int K, int relu)}. */
  public static final class Linear implements SimKernel {

    public static final String ENTRY = "mlp_linear";

    @Override
    public String entry() {
      return ENTRY;
    }

    @Override
    public void launch(SimLaunch launch) {
      long x = launch.pointer(0);
      long w = launch.pointer(1);
      long b = launch.pointer(2);
      long y = launch.pointer(3);
      int m = launch.intArg(4);
      int n = launch.intArg(5);
      int k = launch.intArg(6);
      boolean relu = launch.intArg(7) != 0;
      Dim3 block = launch.block();
      if (block.x() != LINEAR_THREADS || block.y() != 1 || block.z() != 1 || m <= 0 || n <= 0 || k < 0) {
        return;
      }
      linear(launch.memory(), x, w, b, y, m, n, k, relu);
    }
  }

  /**
   * Reads x[0, m*k), w[0, k*n) and b[0, n), writes y[0, m*n). Operands are rounded to TF32 as the kernel
   * stages them; their products are exact, and they are summed in double in k order (the tensor core sums in
   * fp32 in its own order, so the two differ by a few fp32 ulps of the sum), then rounded to float, plus the
   * bias in float, then the activation: the kernel's epilogue step for step.
   */
  static void linear(DeviceMemory memory, long x, long w, long b, long y, int m, int n, int k, boolean relu) {
    float[] bias = new float[n];
    memory.getFloats(b, bias, 0, n);
    int widest = Math.max(n, Math.max(k, 1));
    int rowsPerPass = Math.max(1, Math.min(m, CHUNK / widest));
    int kRowsPerPass = Math.max(1, Math.min(k, CHUNK / n));
    float[] xs = new float[rowsPerPass * k];
    float[] ws = new float[k == 0 ? 0 : kRowsPerPass * n];
    double[] acc = new double[rowsPerPass * n];
    float[] out = new float[rowsPerPass * n];
    for (int m0 = 0; m0 < m; m0 += rowsPerPass) {
      int rows = Math.min(rowsPerPass, m - m0);
      memory.getFloats(x + 4L * m0 * k, xs, 0, rows * k);
      for (int i = 0; i < rows * k; i++) {
        xs[i] = tf32(xs[i]);
      }
      Arrays.fill(acc, 0, rows * n, 0.0);
      for (int k0 = 0; k0 < k; k0 += kRowsPerPass) {
        int depth = Math.min(kRowsPerPass, k - k0);
        memory.getFloats(w + 4L * k0 * n, ws, 0, depth * n);
        for (int i = 0; i < depth * n; i++) {
          ws[i] = tf32(ws[i]);
        }
        for (int r = 0; r < rows; r++) {
          int a = r * n;
          for (int kk = 0; kk < depth; kk++) {
            double xv = xs[r * k + k0 + kk];
            int wo = kk * n;
            for (int j = 0; j < n; j++) {
              acc[a + j] += xv * ws[wo + j];
            }
          }
        }
      }
      for (int i = 0; i < rows * n; i++) {
        float v = (float) acc[i] + bias[i % n];
        out[i] = relu && !(v > 0.0f) ? 0.0f : v;
      }
      memory.putFloats(y + 4L * m0 * n, out, 0, rows * n);
    }
  }
}
