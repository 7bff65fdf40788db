package dev.thaw.runtime.gpu;

/**
 * Physical device memory ({@code cuMemCreate}). It lives until it is both closed and unmapped everywhere.
 */
public interface PhysicalMemory extends AutoCloseable {

  /** The size in bytes, a multiple of the granularity. */
  long size();

  /** Releases the handle ({@code cuMemRelease}); memory still mapped stays until unmapped. Idempotent. */
  @Override
  void close();
}
