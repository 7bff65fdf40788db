package dev.thaw.runtime.gpu;

/**
 * A reserved range of device virtual addresses ({@code cuMemAddressReserve}). Nothing backs it until
 * physical memory is {@link #map mapped} into it.
 */
public interface VirtualRange extends AutoCloseable {

  long address();

  long size();

  /**
   * Maps all of {@code memory} at {@code address() + offset}. The mapping is not accessible until
   * {@link Mapping#setAccess} grants access.
   *
   * @throws IllegalArgumentException if the offset is not a multiple of the granularity or the memory
   *     does not fit in the range
   */
  Mapping map(long offset, PhysicalMemory memory);

  /** Unmaps what is still mapped through this range and frees the addresses. Idempotent. */
  @Override
  void close();
}
