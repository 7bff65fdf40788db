package dev.thaw.runtime.gpu.cuda;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.impl.AbstractKernel;

/** A {@code CUfunction} and its parameter layout, cached by its module; valid while the module is open. */
final class CudaKernel extends AbstractKernel {

  /** Limits every GPU Thaw runs on has (compute capability 3.0 and later). */
  private static final int MAX_THREADS_PER_BLOCK = 1024;
  private static final int MAX_BLOCK_Z = 64;
  private static final int MAX_GRID_YZ = 65535;

  private final CudaModule module;
  private final String name;
  private final long function;
  private final ParamLayout params;

  CudaKernel(CudaModule module, String name, long function, ParamLayout params) {
    this.module = module;
    this.name = name;
    this.function = function;
    this.params = params;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public GpuModule module() {
    return module;
  }

  @Override
  public ParamLayout params() {
    return params;
  }

  /** One {@code cuLaunchKernel} with the slab's pointer array; allocates nothing. */
  @Override
  public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
    checkLaunch(args, sharedMemBytes);
    checkDims(grid, block);
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

  private void checkDims(Dim3 grid, Dim3 block) {
    if (block.total() > MAX_THREADS_PER_BLOCK || block.z() > MAX_BLOCK_Z) {
      throw new IllegalArgumentException("block " + block + " exceeds " + MAX_THREADS_PER_BLOCK
          + " threads or z " + MAX_BLOCK_Z + " for kernel " + name);
    }
    if (grid.y() > MAX_GRID_YZ || grid.z() > MAX_GRID_YZ) {
      throw new IllegalArgumentException("grid " + grid + " exceeds " + MAX_GRID_YZ + " in y or z for kernel " + name);
    }
  }

  @Override
  public String toString() {
    return "CudaKernel[" + name + "]";
  }
}
