package dev.thaw.runtime.gpu;

/** A marker in a stream ({@code CUevent}). */
public interface GpuEvent extends AutoCloseable {

  /** Captures the work submitted to {@code stream} so far; the event completes when that work has. */
  void record(GpuStream stream);

  /** True once the most recent record has completed (or if it was never recorded); never blocks. */
  boolean isComplete();

  /** Blocks until the most recent record has completed. */
  void synchronize();

  /**
   * Milliseconds from {@code start} to this event, both recorded and complete, both with timing.
   *
   * @throws CudaException {@code CUDA_ERROR_NOT_READY} if either has not completed
   */
  float elapsedMillisSince(GpuEvent start);

  /** Idempotent. */
  @Override
  void close();
}
