package dev.thaw.runtime.function;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;

/**
 * A {@link LaunchInterceptor} that may run a launch itself, in place of the session's kernel: GPU profiling
 * launches the instrumented twin of the kernel, with the same arguments plus its guard table.
 *
 * <p>When the session's interceptor is one, every launch calls {@link #beforeLaunch} and then {@link
 * #launchInstead}; if that returns true, the session's kernel is not launched. Only the interceptor installed
 * on the session is asked: an interceptor that chains in front of a redirect must itself be a redirect that
 * forwards, or refuse to chain (a plain interceptor would drop the redirect without a trace).
 */
public interface LaunchRedirect extends LaunchInterceptor {

  /**
   * Runs this launch in place of the kernel {@code kernel} names: the same device work, on {@code stream},
   * with {@code grid}, {@code block}, {@code sharedMemBytes} and {@code args} (complete; not to be changed).
   *
   * @return true when it launched (the session's kernel then is not), false to let the session launch its
   *     kernel as usual
   */
  boolean launchInstead(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args);
}
