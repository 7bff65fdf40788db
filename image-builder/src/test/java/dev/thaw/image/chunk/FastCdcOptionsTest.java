package dev.thaw.image.chunk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Pins which sizes a chunker accepts and that each refusal names its rule. */
class FastCdcOptionsTest {

  @Test
  void defaultsAreValid() {
    FastCdcOptions o = FastCdcOptions.defaults().validate();
    assertEquals(FastCdcOptions.DEFAULT_AVG_SIZE, o.avgSize());
    assertTrue(o.minSize() < o.avgSize() && o.avgSize() < o.maxSize());
  }

  @Test
  void refusesBadSizesNamingTheRule() {
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new FastCdcOptions().setAvgSize(1000).validate()).getMessage().contains("power of two"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new FastCdcOptions().setMinSize(1 << 20).setAvgSize(1 << 20).validate()).getMessage()
        .contains("min < avg < max"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new FastCdcOptions().setMinSize(32).setAvgSize(256).setMaxSize(1024).validate()).getMessage()
        .contains("at least 64"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new FastCdcOptions().setNormalization(30).validate()).getMessage().contains("normalization"));
    assertThrows(IllegalArgumentException.class, () -> new FastCdc(new FastCdcOptions().setMaxSize(3)));
  }
}
