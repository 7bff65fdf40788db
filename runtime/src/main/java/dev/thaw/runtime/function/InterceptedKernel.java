package dev.thaw.runtime.function;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;

/**
 * A session's view of a kernel: every launch passes its session's {@link LaunchInterceptor} first, and a
 * {@link LaunchRedirect} may run the launch in the kernel's place. Without an interceptor a launch is the
 * kernel's own, with nothing added.
 */
final class InterceptedKernel implements Kernel {

  private final FunctionSession session;
  private final KernelRef ref;
  private final Kernel kernel;
  private final ThreadLocal<KernelArgs> cachedArgs;

  InterceptedKernel(FunctionSession session, KernelRef ref, Kernel kernel) {
    this.session = session;
    this.ref = ref;
    this.kernel = kernel;
    this.cachedArgs = ThreadLocal.withInitial(kernel::newArgs);
  }

  @Override
  public String name() {
    return kernel.name();
  }

  @Override
  public GpuModule module() {
    return kernel.module();
  }

  @Override
  public ParamLayout params() {
    return kernel.params();
  }

  @Override
  public void setMaxDynamicSharedMemory(int bytes) {
    kernel.setMaxDynamicSharedMemory(bytes);
  }

  @Override
  public void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args) {
    LaunchInterceptor interceptor = session.interceptor();
    if (interceptor != null) {
      args.checkComplete();
      interceptor.beforeLaunch(ref, grid, block, sharedMemBytes, stream, args);
      if (interceptor instanceof LaunchRedirect redirect
          && redirect.launchInstead(ref, grid, block, sharedMemBytes, stream, args)) {
        return;
      }
    }
    kernel.launch(grid, block, sharedMemBytes, stream, args);
  }

  @Override
  public void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args) {
    KernelArgs slab = cachedArgs.get();
    slab.setAll(args);
    launch(grid, block, 0, stream, slab);
  }
}
