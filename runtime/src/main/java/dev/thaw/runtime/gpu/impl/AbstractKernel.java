package dev.thaw.runtime.gpu.impl;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;

/**
 * What both drivers' kernels share: identity, the typed-varargs launch over a slab cached per thread, and the
 * checks every launch must pass before a driver sees it.
 */
public abstract class AbstractKernel implements Kernel {

  /** Limits of every GPU Thaw runs on (compute capability 3.0 and later). */
  public static final int MAX_THREADS_PER_BLOCK = 1024;
  public static final int MAX_BLOCK_Z = 64;
  public static final int MAX_GRID_YZ = 65535;

  private final GpuModule module;
  private final String name;
  private final ParamLayout params;
  private final ThreadLocal<KernelArgs> cachedArgs = ThreadLocal.withInitial(this::newArgs);

  protected AbstractKernel(GpuModule module, String name, ParamLayout params) {
    this.module = module;
    this.name = name;
    this.params = params;
  }

  @Override
  public final String name() {
    return name;
  }

  @Override
  public final GpuModule module() {
    return module;
  }

  @Override
  public final ParamLayout params() {
    return params;
  }

  @Override
  public final void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args) {
    KernelArgs slab = cachedArgs.get();
    slab.setAll(args);
    launch(grid, block, 0, stream, slab);
  }

  /**
   * Checks the arguments, the shared memory and the dimensions.
   *
   * @throws IllegalArgumentException naming what is wrong
   */
  protected final void checkLaunch(KernelArgs args, int sharedMemBytes, Dim3 grid, Dim3 block) {
    if (args.layout() != params && !args.layout().equals(params)) {
      throw new IllegalArgumentException("arguments were made for another kernel's layout than " + name);
    }
    args.checkComplete();
    if (sharedMemBytes < 0) {
      throw new IllegalArgumentException("shared memory bytes must not be negative: " + sharedMemBytes);
    }
    if (block.total() > MAX_THREADS_PER_BLOCK || block.z() > MAX_BLOCK_Z) {
      throw new IllegalArgumentException("block " + block + " exceeds " + MAX_THREADS_PER_BLOCK
          + " threads or a z of " + MAX_BLOCK_Z + " for kernel " + name);
    }
    if (grid.y() > MAX_GRID_YZ || grid.z() > MAX_GRID_YZ) {
      throw new IllegalArgumentException("grid " + grid + " exceeds " + MAX_GRID_YZ + " in y or z for kernel " + name);
    }
  }
}
