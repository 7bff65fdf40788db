package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * {@code gpt2_layernorm(x, gamma, beta, y, M, C, eps)}: per row, two passes in fp32, {@code mean = sum(x)/C},
 * {@code var = sum((x-mean)^2)/C}, {@code y = half((x-mean) * rstd * gamma + beta)} with
 * {@code rstd = 1/sqrt(var+eps)}.
 *
 * <p>Same maths as the CUDA kernel, not the same bits: the GPU sums in a tree, takes {@code rsqrtf} (within 2
 * ulp) and fuses multiply-adds, so fp32 intermediates differ by a few ulp and a rounded half output by at
 * most one half ulp (~1e-3 relative).
 */
public final class LayerNormSimKernel implements SimKernel {

  @Override
  public String entry() {
    return Gpt2Kernels.LAYERNORM;
  }

  @Override
  public void launch(SimLaunch launch) {
    long x = launch.pointer(0);
    long gamma = launch.pointer(1);
    long beta = launch.pointer(2);
    long y = launch.pointer(3);
    int M = launch.intArg(4);
    int C = launch.intArg(5);
    float eps = launch.floatArg(6);
    if (M <= 0 || C <= 0) {
      return;
    }
    DeviceMemory memory = launch.memory();
    float[] g = SimIo.readHalves(memory, gamma, C);
    float[] b = SimIo.readHalves(memory, beta, C);
    float[] row = new float[C];
    short[] scratch = new short[C];
    for (int m = 0; m < M; m++) {
      memory.getFloats(x + 4L * m * C, row, 0, C);
      float s = 0f;
      for (int c = 0; c < C; c++) {
        s += row[c];
      }
      float mean = s / C;
      float q = 0f;
      for (int c = 0; c < C; c++) {
        float d = row[c] - mean;
        q += d * d;
      }
      float var = q / C;
      float rstd = (float) (1.0 / Math.sqrt(var + eps));
      for (int c = 0; c < C; c++) {
        row[c] = (row[c] - mean) * rstd * g[c] + b[c];
      }
      SimIo.writeHalves(memory, y + 2L * m * C, row, 0, C, scratch);
    }
  }
}
