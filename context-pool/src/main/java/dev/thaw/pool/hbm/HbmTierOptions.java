package dev.thaw.pool.hbm;

/** How much device memory the HBM tier may hold per device. */
public final class HbmTierOptions {

  /** 16 GiB: a few models' weights, a small part of a data-centre GPU's memory, far from what admissions need. */
  public static final long DEFAULT_MAX_BYTES = 16L << 30;

  private long maxBytes = DEFAULT_MAX_BYTES;

  public long maxBytes() {
    return maxBytes;
  }

  /** Device bytes the tier holds at most; offering more evicts the least recently used images first. 0 disables it. */
  public HbmTierOptions setMaxBytes(long bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("maxBytes must not be negative: " + bytes);
    }
    this.maxBytes = bytes;
    return this;
  }
}
