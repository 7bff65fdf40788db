package dev.thaw.runtime.function;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;

/**
 * Sees every kernel launch a {@link FunctionSession} makes, just before the driver does: where access
 * speculation, validation, profiling and restore gating hook in. Runs on the launching thread; it may make
 * {@code stream} wait (e.g. on events of buffers not yet restored) but must not change {@code args}. One that implements {@link LaunchRedirect} may also run the launch itself,
 * in the kernel's place.
 */
@FunctionalInterface
public interface LaunchInterceptor {

  void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args);
}
