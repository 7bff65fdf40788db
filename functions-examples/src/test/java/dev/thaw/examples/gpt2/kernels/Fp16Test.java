package dev.thaw.examples.gpt2.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** {@link Fp16}: exact, round-to-nearest-even binary16, checked against every half and a brute-force rounding. */
class Fp16Test {

  @Test
  void everyHalfRoundTrips() {
    for (int h = 0; h < 1 << 16; h++) {
      float f = Fp16.toFloat((short) h);
      short back = Fp16.fromFloat(f);
      boolean nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
      if (nan) {
        assertTrue(Float.isNaN(f), Integer.toHexString(h));
        assertEquals(h & 0x8000, back & 0x8000, "sign of NaN " + Integer.toHexString(h));
        assertTrue((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0, "NaN stays NaN: " + Integer.toHexString(h));
      } else {
        assertEquals((short) h, back, "half 0x" + Integer.toHexString(h) + " = " + f);
      }
    }
  }

  @Test
  void knownValues() {
    assertEquals(1.0f, Fp16.toFloat((short) 0x3C00));
    assertEquals(-2.0f, Fp16.toFloat((short) 0xC000));
    assertEquals(65504f, Fp16.toFloat(Fp16.MAX_VALUE));
    assertEquals(0x1p-14f, Fp16.toFloat((short) 0x0400));
    assertEquals(0x1p-24f, Fp16.toFloat((short) 0x0001));
    assertEquals(0x3FFp-24f, Fp16.toFloat((short) 0x03FF));
    assertEquals(Float.POSITIVE_INFINITY, Fp16.toFloat(Fp16.POSITIVE_INFINITY));
    assertEquals(Float.NEGATIVE_INFINITY, Fp16.toFloat(Fp16.NEGATIVE_INFINITY));
    assertEquals(Float.floatToRawIntBits(-0.0f), Float.floatToRawIntBits(Fp16.toFloat((short) 0x8000)));
    assertEquals(0.333251953125f, Fp16.toFloat((short) 0x3555));

    assertEquals((short) 0x3C00, Fp16.fromFloat(1.0f));
    assertEquals((short) 0x3555, Fp16.fromFloat(1f / 3));
    assertEquals((short) 0x8000, Fp16.fromFloat(-0.0f));
    assertEquals((short) 0x7BFF, Fp16.fromFloat(65519.996f)); // just under the tie: down
    assertEquals(Fp16.POSITIVE_INFINITY, Fp16.fromFloat(65520f)); // the tie: to even, i.e. infinity
    assertEquals(Fp16.NEGATIVE_INFINITY, Fp16.fromFloat(-1e30f));
    assertEquals(Fp16.POSITIVE_INFINITY, Fp16.fromFloat(Float.POSITIVE_INFINITY));
    assertEquals((short) 0x3C00, Fp16.fromFloat(1f + 0x1p-11f)); // tie, 1.0 is even
    assertEquals((short) 0x3C02, Fp16.fromFloat(1f + 3 * 0x1p-11f)); // tie, to the even 0x3C02
    assertEquals((short) 0x3C01, Fp16.fromFloat(1f + 0x1p-11f + 0x1p-20f)); // above the tie
    assertEquals((short) 0x0000, Fp16.fromFloat(0x1p-25f)); // tie between 0 and the smallest subnormal
    assertEquals((short) 0x0001, Fp16.fromFloat(0x1.000002p-25f));
    assertEquals((short) 0x0002, Fp16.fromFloat(1.5f * 0x1p-24f)); // tie, to even 2
    assertEquals((short) 0x0002, Fp16.fromFloat(2.5f * 0x1p-24f)); // tie, to even 2
    assertEquals((short) 0x0400, Fp16.fromFloat(0x3FFp-24f + 0x1p-25f)); // rounds up into the normals
    assertEquals((short) 0x0000, Fp16.fromFloat(Float.MIN_VALUE));
    assertEquals((short) 0x8000, Fp16.fromFloat(-Float.MIN_VALUE));
    assertTrue(Float.isNaN(Fp16.toFloat(Fp16.fromFloat(Float.NaN))));
    assertEquals((short) 0x7FFF, Fp16.NaN);
  }

  @Test
  void fromFloatIsTheNearestHalfTiesToEven() {
    // Brute force: every non-negative finite half in order; the answer for f is the nearer neighbour.
    int n = 0x7C00;
    double[] values = new double[n + 1];
    for (int h = 0; h <= n; h++) {
      values[h] = Fp16.toFloat((short) h); // values[0x7C00] = infinity
    }
    for (long bits = 0; bits < 0x1_0000_0000L; bits += 4093) {
      float f = Float.intBitsToFloat((int) bits);
      if (Float.isNaN(f)) {
        continue;
      }
      double a = Math.abs((double) f);
      int expected;
      if (a >= 65520.0) {
        expected = 0x7C00;
      } else {
        int i = Arrays.binarySearch(values, 0, n, a);
        if (i >= 0) {
          expected = i;
        } else {
          int hi = -i - 1;
          int lo = hi - 1;
          double dl = a - values[lo];
          double dh = values[hi] - a;
          expected = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
        }
      }
      expected |= (int) (bits >>> 31) << 15;
      assertEquals((short) expected, Fp16.fromFloat(f), "float " + f + " (0x" + Long.toHexString(bits) + ")");
    }
  }
}
