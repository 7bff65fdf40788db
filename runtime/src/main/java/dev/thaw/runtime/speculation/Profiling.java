package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.GpuContext;
import java.util.List;

/**
 * The one entry point the image builder needs: profiling with the validation the session's device has.
 * Where the context {@linkplain GpuContext#recordsAccesses records accesses} (the sim
 * device) that is {@link Profiler} (exact recorded accesses, order source {@code recorded}); on a GPU,
 * {@link GpuProfiler} (PTX instrumentation, order source {@code speculated}).
 */
public final class Profiling {

  private Profiling() {}

  /** Starts profiling {@code session}'s launches with its device's validation. */
  public static AccessProfiler attach(FunctionSession session) {
    return onSim(session) ? Profiler.attach(session) : GpuProfiler.attach(session);
  }

  /** Invokes {@code function} once per sample with validation on and profiles what the invocations launched. */
  public static <S> AccessProfile profile(String image, ThawFunction<S> function, FunctionSession session, S state,
      List<FunctionRequest> samples) throws Exception {
    return onSim(session) ? Profiler.profile(image, function, session, state, samples)
        : GpuProfiler.profile(image, function, session, state, samples);
  }

  static boolean onSim(FunctionSession session) {
    return session.context().recordsAccesses();
  }
}
