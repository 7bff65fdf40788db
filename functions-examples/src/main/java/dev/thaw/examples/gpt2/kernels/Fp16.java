package dev.thaw.examples.gpt2.kernels;

/**
 * IEEE 754 binary16 ("half", CUDA's {@code __half}) held as its raw 16-bit pattern in a {@code short}, and
 * exact conversions to and from {@code float} (Java 17 has no {@code Float.float16ToFloat}).
 *
 * <p>{@link #toFloat} is exact (every half is a float). {@link #fromFloat} rounds to nearest, ties to even,
 * like CUDA's {@code __float2half_rn}: subnormal halves are produced where the value is below 2<sup>-14</sup>,
 * magnitudes from 65520 up become infinity, and a NaN stays a quiet NaN of the same sign keeping the top
 * payload bits. Non-NaN halves round-trip bit for bit.
 */
public final class Fp16 {

  /** Positive infinity. */
  public static final short POSITIVE_INFINITY = (short) 0x7C00;
  /** Negative infinity. */
  public static final short NEGATIVE_INFINITY = (short) 0xFC00;
  /** The largest finite half, 65504. */
  public static final short MAX_VALUE = (short) 0x7BFF;
  /** The canonical quiet NaN CUDA produces. */
  public static final short NaN = (short) 0x7FFF;

  // Every half's float value: 256 KiB, and the conversion on the sim kernels' hot path becomes one load.
  private static final float[] TO_FLOAT = new float[1 << 16];

  static {
    for (int h = 0; h < TO_FLOAT.length; h++) {
      TO_FLOAT[h] = convert(h);
    }
  }

  private Fp16() {}

  /** The float value of a half, exactly. */
  public static float toFloat(short half) {
    return TO_FLOAT[half & 0xFFFF];
  }

  private static float convert(int h) {
    int sign = (h & 0x8000) << 16;
    int exp = (h >>> 10) & 0x1F;
    int mant = h & 0x3FF;
    if (exp == 0x1F) {
      return Float.intBitsToFloat(sign | 0x7F800000 | (mant << 13));
    }
    if (exp == 0) {
      // Zero or subnormal: mant * 2^-24, exact in float.
      float v = mant * 0x1p-24f;
      return sign != 0 ? -v : v;
    }
    return Float.intBitsToFloat(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
  }

  /** The half nearest to {@code f}, ties to even (CUDA's {@code __float2half_rn}). */
  public static short fromFloat(float f) {
    int bits = Float.floatToRawIntBits(f);
    int sign = (bits >>> 16) & 0x8000;
    int abs = bits & 0x7FFFFFFF;
    if (abs >= 0x7F800000) {
      if (abs == 0x7F800000) {
        return (short) (sign | 0x7C00);
      }
      return (short) (sign | 0x7E00 | ((abs >>> 13) & 0x3FF));
    }
    if (abs >= 0x477FF000) {
      // >= 65520, halfway between 65504 and 65536, rounds (to even) up to infinity.
      return (short) (sign | 0x7C00);
    }
    if (abs >= 0x38800000) {
      // Normal half (>= 2^-14): rebias the exponent by 127 - 15 and round away the low 13 mantissa bits.
      // A carry out of the mantissa correctly bumps the exponent.
      int r = abs - ((127 - 15) << 23);
      return (short) (sign | ((r + 0x0FFF + ((r >>> 13) & 1)) >>> 13));
    }
    if (abs <= 0x33000000) {
      // <= 2^-25: half of the smallest subnormal or less rounds (to even) to zero.
      return (short) sign;
    }
    // Subnormal half: round(f / 2^-24) = round(m * 2^(e - 126)) with m the float's 24-bit significand.
    int e = abs >>> 23;
    int m = (abs & 0x7FFFFF) | 0x800000;
    int shift = 126 - e; // 14..24
    int q = m >>> shift;
    int rem = m & ((1 << shift) - 1);
    int halfway = 1 << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1) != 0)) {
      q++; // may become 0x400, the smallest normal: the right encoding
    }
    return (short) (sign | q);
  }

  /** Halves to floats, exactly. */
  public static void toFloats(short[] src, int srcOff, float[] dst, int dstOff, int len) {
    for (int i = 0; i < len; i++) {
      dst[dstOff + i] = TO_FLOAT[src[srcOff + i] & 0xFFFF];
    }
  }

  /** Floats to halves, each rounded to nearest even. */
  public static void fromFloats(float[] src, int srcOff, short[] dst, int dstOff, int len) {
    for (int i = 0; i < len; i++) {
      dst[dstOff + i] = fromFloat(src[srcOff + i]);
    }
  }
}
