package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.transformer.SimLaunches;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;

/**
 * {@code gpt2_lm_head(X, wte, logits, M, V, C)}: {@code logits[m,v] = sum_c X[m,c] * wte[v,c]}, fp32
 * accumulation in c order (the GPU's tensor cores sum in another order: expect a few fp32 ulp of
 * {@code sum_c |X wte|}).
 *
 * <p>Reads X [0, M*C) and wte [0, V*C) (never a row past V), writes logits [0, M*V): what the CUDA kernel
 * touches for the grid {@link Gpt2Kernels} uses, (ceil(V/16), ceil(M/16)) x 256 threads; other shapes are
 * refused.
 */
public final class LmHeadSimKernel implements SimKernel {

  /** Vocabulary rows converted (and transposed) at a time. */
  private static final int V_BLOCK = 256;

  @Override
  public String entry() {
    return Gpt2Kernels.LM_HEAD;
  }

  @Override
  public void launch(SimLaunch launch) {
    long X = launch.pointer(0);
    long wte = launch.pointer(1);
    long logits = launch.pointer(2);
    int M = launch.intArg(3);
    int V = launch.intArg(4);
    int C = launch.intArg(5);
    if (M <= 0 || V <= 0 || C <= 0 || C % Gpt2Kernels.TILE != 0) {
      throw new IllegalArgumentException("gpt2_lm_head: bad shape M=" + M + " V=" + V + " C=" + C);
    }
    SimLaunches.expectShape(launch, SimLaunches.ceilDiv(V, Gpt2Kernels.TILE), SimLaunches.ceilDiv(M, Gpt2Kernels.TILE),
        Gpt2Kernels.MATMUL_THREADS);
    DeviceMemory memory = launch.memory();
    float[] x = SimIo.readHalves(memory, X, M * C);
    short[] wh = new short[V_BLOCK * C];
    float[] w = new float[V_BLOCK * C];
    float[] wt = new float[C * V_BLOCK]; // [c][j]: so the inner loop runs over contiguous j
    float[] acc = new float[V_BLOCK];
    for (int v0 = 0; v0 < V; v0 += V_BLOCK) {
      int nv = Math.min(V_BLOCK, V - v0);
      SimIo.readHalves(memory, wte + 2L * v0 * C, wh, w, 0, nv * C);
      for (int j = 0; j < nv; j++) {
        for (int c = 0; c < C; c++) {
          wt[c * nv + j] = w[j * C + c];
        }
      }
      for (int m = 0; m < M; m++) {
        Arrays.fill(acc, 0, nv, 0f);
        int xb = m * C;
        for (int c = 0; c < C; c++) {
          float xv = x[xb + c];
          int wb = c * nv;
          for (int j = 0; j < nv; j++) {
            acc[j] += xv * wt[wb + j];
          }
        }
        memory.putFloats(logits + 4L * ((long) m * V + v0), acc, 0, nv);
      }
    }
  }
}
