package dev.thaw.runtime.gpu;

/**
 * Physical device memory ({@code cuMemCreate}). It lives until it is both closed and unmapped everywhere.
 */
public interface PhysicalMemory extends AutoCloseable {

  /** The size in bytes, a multiple of the granularity. */
  long size();

  /**
   * The ordinal of the device whose memory this is: the creating context's device, or for imported memory the
   * exporter's ({@code cuMemGetAllocationPropertiesFromHandle}), which may be another device than the importer's.
   */
  int deviceOrdinal();

  /** True when it was made by {@link GpuContext#createExportableMemory} or imported, so it can be exported. */
  default boolean isExportable() {
    return false;
  }

  /**
   * A new POSIX file descriptor for this memory ({@code cuMemExportToShareableHandle}), owned by the caller.
   * Another process takes it (e.g. with {@code pidfd_getfd}) and {@link GpuContext#importMemory imports} it; the
   * memory lives until every handle, descriptor and mapping of it is gone.
   *
   * @throws IllegalStateException if the memory was not created exportable
   */
  default int exportPosixFd() {
    throw new IllegalStateException("physical memory not created exportable cannot be exported");
  }

  /** Releases the handle ({@code cuMemRelease}); memory still mapped stays until unmapped. Idempotent. */
  @Override
  void close();
}
