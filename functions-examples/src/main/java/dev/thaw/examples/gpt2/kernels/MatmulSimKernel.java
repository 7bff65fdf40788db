package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.transformer.SimLaunches;
import dev.thaw.runtime.gpu.sim.DeviceMemory;
import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.Arrays;

/**
 * {@code gpt2_matmul(X, W, bias, Y, M, N, K, gelu)}: {@code Y[m,n] = half(act(sum_k X[m,k]*W[k,n] + bias[n]))},
 * W [K, N]; act = identity, or gelu_new when {@code gelu != 0}.
 *
 * <p>fp32 accumulation in k order (the GPU's tensor cores multiply halves exactly and accumulate in fp32 in
 * another order), the same epilogue in fp32, rounded to half once. Expect agreement to a few fp32 ulp of
 * {@code sum_k |X W|} before the final rounding, i.e. one half ulp (~1e-3 relative) after it.
 *
 * <p>Reads X rows [0, M), all of W and bias; writes Y [0, M*N): what the CUDA kernel touches when launched
 * with the grid {@link Gpt2Kernels} uses, (N/16, ceil(M/16)) x 256 threads; other shapes are refused.
 */
public final class MatmulSimKernel implements SimKernel {

  /** Rows computed per sweep over W: bounds the heap at ROW_BLOCK * (N + K) floats. */
  private static final int ROW_BLOCK = 128;

  static final int EPILOGUE_HALF = 0;
  static final int EPILOGUE_GELU = 1;
  static final int EPILOGUE_RESIDUAL = 2;

  @Override
  public String entry() {
    return Gpt2Kernels.MATMUL;
  }

  @Override
  public void launch(SimLaunch launch) {
    int gelu = launch.intArg(7);
    run(launch, gelu != 0 ? EPILOGUE_GELU : EPILOGUE_HALF);
  }

  /** Parameters 0..6 are (X, W, bias, out, M, N, K) for both matmul entries; out is Y (half) or R (float). */
  static void run(SimLaunch launch, int epilogue) {
    long X = launch.pointer(0);
    long W = launch.pointer(1);
    long bias = launch.pointer(2);
    long out = launch.pointer(3);
    int M = launch.intArg(4);
    int N = launch.intArg(5);
    int K = launch.intArg(6);
    if (M <= 0 || N <= 0 || K <= 0 || N % Gpt2Kernels.TILE != 0 || K % Gpt2Kernels.TILE != 0) {
      throw new IllegalArgumentException(launch.kernelName() + ": bad shape M=" + M + " N=" + N + " K=" + K);
    }
    SimLaunches.expectShape(launch, N / Gpt2Kernels.TILE, SimLaunches.ceilDiv(M, Gpt2Kernels.TILE),
        Gpt2Kernels.MATMUL_THREADS);
    DeviceMemory memory = launch.memory();
    float[] b = SimIo.readHalves(memory, bias, N);
    int rowBlock = Math.min(M, ROW_BLOCK);
    float[] xs = new float[rowBlock * K];
    short[] xh = new short[rowBlock * Math.max(K, N)];
    float[] acc = new float[rowBlock * N];
    float[] w = new float[N];
    short[] wh = new short[N];
    for (int m0 = 0; m0 < M; m0 += rowBlock) {
      int rows = Math.min(rowBlock, M - m0);
      SimIo.readHalves(memory, X + 2L * m0 * K, xh, xs, 0, rows * K);
      Arrays.fill(acc, 0, rows * N, 0f);
      for (int k = 0; k < K; k++) {
        SimIo.readHalves(memory, W + 2L * k * N, wh, w, 0, N);
        for (int r = 0; r < rows; r++) {
          float xv = xs[r * K + k];
          int base = r * N;
          for (int n = 0; n < N; n++) {
            acc[base + n] += xv * w[n];
          }
        }
      }
      long first = (long) m0 * N;
      int count = rows * N;
      if (epilogue == EPILOGUE_RESIDUAL) {
        float[] res = new float[count];
        memory.getFloats(out + 4L * first, res, 0, count);
        for (int i = 0; i < count; i++) {
          res[i] = res[i] + (acc[i] + b[i % N]);
        }
        memory.putFloats(out + 4L * first, res, 0, count);
      } else {
        for (int i = 0; i < count; i++) {
          float v = acc[i] + b[i % N];
          acc[i] = epilogue == EPILOGUE_GELU ? SimIo.geluNew(v) : v;
        }
        SimIo.writeHalves(memory, out + 2L * first, acc, 0, count, xh); // count <= rowBlock * N
      }
    }
  }
}
