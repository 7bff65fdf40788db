package dev.thaw.image;

/**
 * Told how far a long operation (a build's snapshot, a restore's copy, a verify, an export) has got, in bytes.
 * Called from worker threads: implementations must be thread-safe. {@link #NONE} ignores everything.
 */
public interface ProgressListener {

  ProgressListener NONE = new ProgressListener() {};

  /** A phase of {@code totalBytes} begins. */
  default void start(String phase, long totalBytes) {}

  /** {@code bytes} more are done. */
  default void advance(long bytes) {}

  /** The phase ended, done or failed. */
  default void finish() {}
}
