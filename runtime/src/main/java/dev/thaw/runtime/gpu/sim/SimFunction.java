package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.impl.AbstractKernel;

/** A kernel of a sim module, bound to its Java implementation. */
final class SimFunction extends AbstractKernel {

  /** What a launch may ask for without opting in (sm_90 limits). */
  static final int MAX_THREADS_PER_BLOCK = 1024;
  static final int MAX_BLOCK_Z = 64;
  static final int MAX_GRID_YZ = 65535;
  static final int MAX_DYNAMIC_SHARED = 48 << 10;

  private final SimModule module;
  private final String name;
  private final ParamLayout params;
  private final SimKernel impl;

  SimFunction(SimModule module, String name, ParamLayout params, SimKernel impl) {
    this.module = module;
    this.name = name;
    this.params = params;
    this.impl = impl;
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

  @Override
  public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
    checkLaunch(args, sharedMemBytes);
    String call = "cuLaunchKernel";
    module.checkOpen();
    if (block.total() > MAX_THREADS_PER_BLOCK || block.z() > MAX_BLOCK_Z) {
      throw new IllegalArgumentException("block " + block + " exceeds " + MAX_THREADS_PER_BLOCK
          + " threads or a z of " + MAX_BLOCK_Z);
    }
    if (grid.y() > MAX_GRID_YZ || grid.z() > MAX_GRID_YZ) {
      throw new IllegalArgumentException("grid " + grid + " exceeds " + MAX_GRID_YZ + " in y or z");
    }
    SimContext context = module.context();
    SimStream s = context.ownStream(stream, call);
    if (sharedMemBytes > MAX_DYNAMIC_SHARED) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, sharedMemBytes
          + " bytes of dynamic shared memory exceed " + MAX_DYNAMIC_SHARED);
    }
    // The copy makes args reusable as soon as this returns, as cuLaunchKernel does.
    byte[] slab = new byte[params.totalSize()];
    args.slab().get(0, slab);
    s.enqueue(() -> context.runLaunch(name, impl, grid, block, sharedMemBytes, params, slab));
  }

  @Override
  public String toString() {
    return "SimFunction[" + name + " -> " + impl.getClass().getName() + "]";
  }
}
