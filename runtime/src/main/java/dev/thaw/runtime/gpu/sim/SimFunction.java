package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.impl.AbstractKernel;

/** A kernel of a sim module, bound to its Java implementation. */
final class SimFunction extends AbstractKernel {

  /** What a launch may ask for without opting in (sm_90 limits). */
  static final int MAX_DYNAMIC_SHARED = 48 << 10;

  private final SimModule module;
  private final SimKernel impl;

  SimFunction(SimModule module, String name, ParamLayout params, SimKernel impl) {
    super(module, name, params);
    this.module = module;
    this.impl = impl;
  }

  @Override
  public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
    checkLaunch(args, sharedMemBytes, grid, block);
    String call = "cuLaunchKernel";
    module.checkOpen();
    SimContext context = module.context();
    SimStream s = context.ownStream(stream, call);
    if (sharedMemBytes > MAX_DYNAMIC_SHARED) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, sharedMemBytes
          + " bytes of dynamic shared memory exceed " + MAX_DYNAMIC_SHARED);
    }
    // The copy makes args reusable as soon as this returns, as cuLaunchKernel does.
    byte[] slab = new byte[params().totalSize()];
    args.slab().get(0, slab);
    s.enqueue(() -> context.runLaunch(name(), impl, grid, block, sharedMemBytes, params(), slab));
  }

  @Override
  public String toString() {
    return "SimFunction[" + name() + " -> " + impl.getClass().getName() + "]";
  }
}
