package dev.thaw.image.chunk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Pins which sizes a chunker accepts and that each refusal names its rule. */
class ChunkerOptionsTest {

  @Test
  void defaultsAreValid() {
    ChunkerOptions o = ChunkerOptions.defaults().validate();
    assertEquals(ChunkerOptions.DEFAULT_AVG_SIZE, o.avgSize());
    assertTrue(o.minSize() < o.avgSize() && o.avgSize() < o.maxSize());
  }

  @Test
  void refusesBadSizesNamingTheRule() {
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new ChunkerOptions().setAvgSize(1000).validate()).getMessage().contains("power of two"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new ChunkerOptions().setMinSize(1 << 20).setAvgSize(1 << 20).validate()).getMessage()
        .contains("min < avg < max"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new ChunkerOptions().setMinSize(32).setAvgSize(256).setMaxSize(1024).validate()).getMessage()
        .contains("at least 64"));
    assertTrue(assertThrows(IllegalArgumentException.class,
        () -> new ChunkerOptions().setNormalization(30).validate()).getMessage().contains("normalization"));
    assertThrows(IllegalArgumentException.class, () -> new Chunker(new ChunkerOptions().setMaxSize(3)));
  }
}
