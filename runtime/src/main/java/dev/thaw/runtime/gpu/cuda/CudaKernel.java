package dev.thaw.runtime.gpu.cuda;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.impl.AbstractKernel;

/** A {@code CUfunction} and its parameter layout, cached by its module; valid while the module is open. */
final class CudaKernel extends AbstractKernel {

  private final CudaModule module;
  private final long function;
  /**
   * The most dynamic shared memory set through {@link #setMaxDynamicSharedMemory}, -1 before the first call (the
   * driver's default then depends on the kernel's static shared memory); launches are checked by the driver.
   */
  private volatile int maxDynamicShared = -1;

  CudaKernel(CudaModule module, String name, long function, ParamLayout params) {
    super(module, name, params);
    this.module = module;
    this.function = function;
  }

  /** One {@code cuLaunchKernel} with the slab's pointer array; allocates nothing. */
  @Override
  public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
    checkLaunch(args, sharedMemBytes, grid, block);
    module.checkOpen();
    if (!(stream instanceof CudaStream) || ((CudaStream) stream).context != module.context) {
      throw new IllegalArgumentException(stream == null ? "stream is null"
          : stream + " is not a stream of " + module.context.describe());
    }
    CudaStream s = (CudaStream) stream;
    s.checkOpen();
    module.context.ensureCurrent();
    int r = CudaNative.cuLaunchKernel(function, grid.x(), grid.y(), grid.z(), block.x(), block.y(), block.z(),
        sharedMemBytes, s.handle, args.pointerArrayAddress(), 0L);
    if (r != CudaNative.CUDA_SUCCESS) {
      throw CudaNative.error("cuLaunchKernel", r);
    }
  }

  @Override
  public synchronized void setMaxDynamicSharedMemory(int bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("dynamic shared memory bytes must not be negative: " + bytes);
    }
    if (bytes <= maxDynamicShared) {
      return;
    }
    module.checkOpen();
    module.context.ensureCurrent();
    CudaNative.check(CudaNative.cuFuncSetAttribute(function,
        CudaNative.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes), "cuFuncSetAttribute");
    maxDynamicShared = bytes;
  }

  @Override
  public String toString() {
    return "CudaKernel[" + name() + "]";
  }
}
