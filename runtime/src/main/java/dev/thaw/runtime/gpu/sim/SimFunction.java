package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.impl.AbstractKernel;

/** A kernel of a sim module, bound to its Java implementation. */
final class SimFunction extends AbstractKernel {

  /** What one block may opt in to on sm_90 (228 KiB per SM less 1 KiB the system reserves per block). */
  static final int MAX_DYNAMIC_SHARED_OPTIN = 227 << 10;

  private final SimModule module;
  private final SimKernel impl;
  private volatile int maxDynamicShared = DEFAULT_MAX_DYNAMIC_SHARED_MEMORY;

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
    int allowed = maxDynamicShared;
    if (sharedMemBytes > allowed) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, sharedMemBytes
          + " bytes of dynamic shared memory exceed the " + allowed + " this kernel allows"
          + (allowed < MAX_DYNAMIC_SHARED_OPTIN ? " (cuFuncSetAttribute raises it)" : ""));
    }
    // The copy makes args reusable as soon as this returns, as cuLaunchKernel does.
    byte[] slab = new byte[params().totalSize()];
    args.slab().get(0, slab);
    s.enqueue(() -> context.runLaunch(name(), impl, grid, block, sharedMemBytes, params(), slab));
  }

  @Override
  public synchronized void setMaxDynamicSharedMemory(int bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("dynamic shared memory bytes must not be negative: " + bytes);
    }
    module.checkOpen();
    if (bytes > MAX_DYNAMIC_SHARED_OPTIN) {
      throw CudaError.exception("cuFuncSetAttribute", CudaError.CUDA_ERROR_INVALID_VALUE, bytes
          + " bytes of dynamic shared memory exceed the " + MAX_DYNAMIC_SHARED_OPTIN + " a block may opt in to");
    }
    maxDynamicShared = Math.max(maxDynamicShared, bytes);
  }

  @Override
  public String toString() {
    return "SimFunction[" + name() + " -> " + impl.getClass().getName() + "]";
  }
}
