package dev.thaw.runtime.gpu.sim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/** Pins that recorded ranges normalise to the exact union of what was touched, whatever the order. */
class AccessRecorderTest {

  @Test
  void mergesOverlappingAndTouchingRangesAndKeepsGaps() {
    AccessRecorder r = new AccessRecorder();
    r.add(100, 104);
    r.add(200, 208);
    r.add(104, 108);
    r.add(96, 100);
    r.add(300, 301);
    r.add(206, 210);
    assertEquals(List.of(new AddressRange(96, 108), new AddressRange(200, 210), new AddressRange(300, 301)),
        r.toLog().ranges());
  }

  @Test
  void randomAccessesNormaliseToTheirUnionThroughCompaction() {
    Random rnd = new Random(42);
    AccessRecorder r = new AccessRecorder();
    TreeSet<Long> touched = new TreeSet<>();
    for (int i = 0; i < 50_000; i++) {
      long word = rnd.nextInt(40_000);
      r.add(word * 4, word * 4 + 4);
      touched.add(word);
    }
    AccessLog log = r.toLog();
    assertEquals(touched.size() * 4L, log.totalBytes());
    for (long w : touched) {
      assertTrue(log.covers(w * 4, 4));
    }
    long gaps = 0;
    Long prev = null;
    for (long w : touched) {
      if (prev != null && w != prev + 1) {
        gaps++;
      }
      prev = w;
    }
    assertEquals(gaps + 1, log.rangeCount());
    assertFalse(log.intersects(new AddressRange(160_000, 160_004)));
  }
}
