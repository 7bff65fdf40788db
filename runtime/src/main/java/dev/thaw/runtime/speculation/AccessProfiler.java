package dev.thaw.runtime.speculation;

/**
 * Profiling attached to a session: {@link Profiler} on the sim device, {@link GpuProfiler} on a GPU. Make one with
 * {@link Profiling#attach}, run the profiling invocations, then {@link #finish}.
 */
public interface AccessProfiler extends AutoCloseable {

  /** Waits for the session's stream and makes the profile of everything launched since it was attached. */
  AccessProfile finish(String image);

  /** Detaches from the session and frees what profiling held. Idempotent. */
  @Override
  void close();
}
