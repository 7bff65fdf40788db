package dev.thaw.image.chunk;

/**
 * The gear hash's 256 random 64-bit values, one per byte value.
 *
 * <p>Generated, not checked in: SplitMix64 (Steele, Lea, Flood; the JDK's {@code SplittableRandom} step)
 * from the fixed seed {@link #SEED}, the i-th output for byte value {@code i}. The table is part of the image
 * format: a different table moves every chunk boundary and so changes every digest; {@code GearTableTest}
 * pins it.
 */
final class GearTable {

  /** ASCII "thawgear". */
  static final long SEED = 0x7468617767656172L;

  static final long[] GEAR = generate(SEED);

  private GearTable() {}

  static long[] generate(long seed) {
    long[] t = new long[256];
    long x = seed;
    for (int i = 0; i < 256; i++) {
      x += 0x9E3779B97F4A7C15L;
      long z = x;
      z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
      z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
      t[i] = z ^ (z >>> 31);
    }
    return t;
  }
}
