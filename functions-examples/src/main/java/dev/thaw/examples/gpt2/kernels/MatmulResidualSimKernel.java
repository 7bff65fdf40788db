package dev.thaw.examples.gpt2.kernels;

import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;

/**
 * {@code gpt2_matmul_residual(X, W, bias, R, M, N, K)}: {@code R[m,n] = R[m,n] + (sum_k X[m,k]*W[k,n] +
 * bias[n])}, fp32 throughout; as {@link MatmulSimKernel} otherwise (R rows [0, M) read and written).
 */
public final class MatmulResidualSimKernel implements SimKernel {

  @Override
  public String entry() {
    return Gpt2Kernels.MATMUL_RESIDUAL;
  }

  @Override
  public void launch(SimLaunch launch) {
    MatmulSimKernel.run(launch, MatmulSimKernel.EPILOGUE_RESIDUAL);
  }
}
