package dev.thaw.pool.cache;

/**
 * The host cache cannot take an image's chunks: even after evicting everything no restore pins, no
 * contiguous run of free bytes is large enough. Nothing was staged; the caller may restore from the store.
 */
public class HostCacheFullException extends RuntimeException {

  private final long needed;
  private final long capacity;
  private final long pinned;

  public HostCacheFullException(String image, long needed, long capacity, long pinned) {
    super(String.format("the host cache (%d bytes, %d pinned by running restores) has no room for the %d bytes "
        + "of image '%s'", capacity, pinned, needed, image));
    this.needed = needed;
    this.capacity = capacity;
    this.pinned = pinned;
  }

  /** Bytes the image needed that the cache did not already hold. */
  public long needed() {
    return needed;
  }

  public long capacity() {
    return capacity;
  }

  /** Bytes pinned by leases when the cache gave up. */
  public long pinned() {
    return pinned;
  }
}
