package dev.thaw.runtime.gpu;

/** Physical memory mapped into a {@link VirtualRange} ({@code cuMemMap}). */
public interface Mapping extends AutoCloseable {

  long address();

  long size();

  /** Grants this device {@code access} to the mapping ({@code cuMemSetAccess}). */
  void setAccess(MemoryAccess access);

  /** The access last granted, or {@code null} before any. */
  MemoryAccess access();

  /** Unmaps ({@code cuMemUnmap}). Idempotent. */
  @Override
  void close();
}
