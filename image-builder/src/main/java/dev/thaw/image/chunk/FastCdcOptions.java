package dev.thaw.image.chunk;

/**
 * Sizes for content-defined chunking: every chunk but a stream's last is at least {@link #minSize()} and at
 * most {@link #maxSize()} bytes, and chunks average about {@link #avgSize()} bytes on random data.
 *
 * <p>All three are powers of two with {@code min < avg < max}: the cut masks are built from
 * {@code log2(avg)}, and power-of-two minimum and maximum keep the skip and the forced cut aligned with the
 * 4 KiB pages a GPU allocation is made of. {@link #normalization()} is FastCDC's normalization level
 * {@code NC}: below the average the cut mask has {@code log2(avg) + NC} bits (harder to cut), above it
 * {@code log2(avg) - NC} (easier), which narrows the chunk-size distribution around the average.
 *
 * <p>Changing any of these changes every chunk boundary, and so every digest, of every image built after:
 * images built with other options still restore, they just share no chunks with new ones.
 */
public final class FastCdcOptions {

  /**
   * 256 KiB, chosen by measurement ({@code docs/benchmarks/chunking.md}): well below a transformer's weight
   * tensors (1–5 MiB in GPT-2 small, more in bigger models), so a changed tensor costs about its own size even
   * when tensors share one allocation (1.2× the changed bytes, against 1.9× at 1 MiB); store reads measured no
   * faster per byte with bigger chunks.
   */
  public static final int DEFAULT_AVG_SIZE = 256 << 10;

  public static final int DEFAULT_MIN_SIZE = DEFAULT_AVG_SIZE / 4;
  public static final int DEFAULT_MAX_SIZE = DEFAULT_AVG_SIZE * 4;
  public static final int DEFAULT_NORMALIZATION = 2;

  /** Chunks are read into single buffers: keep them well inside an {@code int}. */
  public static final int MAX_CHUNK_SIZE_LIMIT = 1 << 30;

  private int minSize = DEFAULT_MIN_SIZE;
  private int avgSize = DEFAULT_AVG_SIZE;
  private int maxSize = DEFAULT_MAX_SIZE;
  private int normalization = DEFAULT_NORMALIZATION;

  public FastCdcOptions() {}

  public FastCdcOptions(FastCdcOptions other) {
    this.minSize = other.minSize;
    this.avgSize = other.avgSize;
    this.maxSize = other.maxSize;
    this.normalization = other.normalization;
  }

  /** The defaults. */
  public static FastCdcOptions defaults() {
    return new FastCdcOptions();
  }

  /** {@code min = avg / 4}, {@code max = avg * 4}: the proportions the defaults use. */
  public static FastCdcOptions ofAverage(int avgSize) {
    return new FastCdcOptions().setAvgSize(avgSize).setMinSize(avgSize / 4).setMaxSize(avgSize * 4).validate();
  }

  public int minSize() {
    return minSize;
  }

  public int avgSize() {
    return avgSize;
  }

  public int maxSize() {
    return maxSize;
  }

  public int normalization() {
    return normalization;
  }

  public FastCdcOptions setMinSize(int minSize) {
    this.minSize = minSize;
    return this;
  }

  public FastCdcOptions setAvgSize(int avgSize) {
    this.avgSize = avgSize;
    return this;
  }

  public FastCdcOptions setMaxSize(int maxSize) {
    this.maxSize = maxSize;
    return this;
  }

  public FastCdcOptions setNormalization(int normalization) {
    this.normalization = normalization;
    return this;
  }

  /**
   * Checks the invariants a chunker relies on.
   *
   * @return this
   * @throws IllegalArgumentException naming the rule broken
   */
  public FastCdcOptions validate() {
    requirePowerOfTwo("minSize", minSize);
    requirePowerOfTwo("avgSize", avgSize);
    requirePowerOfTwo("maxSize", maxSize);
    if (!(minSize < avgSize && avgSize < maxSize)) {
      throw new IllegalArgumentException(
          "chunk sizes need min < avg < max, got min=" + minSize + " avg=" + avgSize + " max=" + maxSize);
    }
    if (minSize < 64) {
      throw new IllegalArgumentException("minSize must be at least 64 (the gear hash window), got " + minSize);
    }
    if (maxSize > MAX_CHUNK_SIZE_LIMIT) {
      throw new IllegalArgumentException("maxSize must be at most " + MAX_CHUNK_SIZE_LIMIT + ", got " + maxSize);
    }
    int bits = Integer.numberOfTrailingZeros(avgSize);
    if (normalization < 0 || normalization >= bits || bits + normalization > 63) {
      throw new IllegalArgumentException(
          "normalization must be in [0, log2(avgSize)) = [0, " + bits + "), got " + normalization);
    }
    return this;
  }

  private static void requirePowerOfTwo(String name, int v) {
    if (v <= 0 || Integer.bitCount(v) != 1) {
      throw new IllegalArgumentException(name + " must be a positive power of two, got " + v);
    }
  }

  @Override
  public String toString() {
    return "ChunkerOptions{min=" + minSize + ", avg=" + avgSize + ", max=" + maxSize + ", nc=" + normalization + "}";
  }
}
