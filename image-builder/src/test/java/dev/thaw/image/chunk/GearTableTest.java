package dev.thaw.image.chunk;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

/**
 * Pins the gear table. If this fails, every chunk boundary and digest has moved: existing images would share
 * no chunks with new ones. Change the expected values only together with a format version bump.
 */
class GearTableTest {

  @Test
  void tableIsTheDocumentedSplitMix64Sequence() {
    ByteBuffer b = ByteBuffer.allocate(256 * 8);
    for (long v : GearTable.GEAR) {
      b.putLong(v);
    }
    b.flip();
    assertEquals(EXPECTED_TABLE_DIGEST, Digest.of(b).toString());
    assertEquals(EXPECTED_FIRST, GearTable.GEAR[0]);
  }

  static final String EXPECTED_TABLE_DIGEST = "sha256:7bcee68b1043d0c59b5c4e5f54d045831ccd4e2e25b38d6e2d01d06258a8af23";
  static final long EXPECTED_FIRST = 0xE5CD3D9D46477D51L;
}
