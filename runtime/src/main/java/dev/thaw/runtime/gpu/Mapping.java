package dev.thaw.runtime.gpu;

/** Physical memory mapped into a {@link VirtualRange} ({@code cuMemMap}). */
public interface Mapping extends AutoCloseable {

  long address();

  long size();

  /** Grants the device of the context that mapped it {@code access} to the mapping ({@code cuMemSetAccess}). */
  void setAccess(MemoryAccess access);

  /** The access last granted, or {@code null} before any. */
  MemoryAccess access();

  /**
   * Grants another device {@code access} to the mapping ({@code cuMemSetAccess} with that device's location): its
   * copy engines and kernels may then read (and with {@link MemoryAccess#READ_WRITE} write) these bytes over the
   * peer link. Access of the mapping's own device is unchanged. Memory mapped with the virtual memory management API
   * is reached from another device only this way; {@code cuCtxEnablePeerAccess} covers {@code cuMemAlloc} memory
   * alone, which Thaw never makes.
   *
   * @throws IllegalArgumentException if the ordinal names no device of the driver
   * @throws CudaException if the device cannot reach the memory's device ({@link GpuDriver#canAccessPeer})
   */
  void setAccessFor(int deviceOrdinal, MemoryAccess access);

  /** The access last granted to device {@code deviceOrdinal}, or {@code null} before any. */
  MemoryAccess accessFor(int deviceOrdinal);

  /** Unmaps ({@code cuMemUnmap}). Idempotent. */
  @Override
  void close();
}
