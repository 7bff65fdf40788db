package dev.thaw.runtime.gpu.impl;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;

/** What both drivers' kernels share: the typed-varargs launch over a slab cached per thread. */
public abstract class AbstractKernel implements Kernel {

  private final ThreadLocal<KernelArgs> cachedArgs = ThreadLocal.withInitial(this::newArgs);

  @Override
  public final void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args) {
    KernelArgs slab = cachedArgs.get();
    slab.setAll(args);
    launch(grid, block, 0, stream, slab);
  }

  /** Checks what every launch must satisfy before a driver sees it. */
  protected final void checkLaunch(KernelArgs args, int sharedMemBytes) {
    if (args.layout() != params() && !args.layout().equals(params())) {
      throw new IllegalArgumentException("arguments were made for another kernel's layout than " + name());
    }
    args.checkComplete();
    if (sharedMemBytes < 0) {
      throw new IllegalArgumentException("shared memory bytes must not be negative: " + sharedMemBytes);
    }
  }
}
