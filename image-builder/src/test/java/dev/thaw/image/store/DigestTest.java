package dev.thaw.image.store;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import org.junit.jupiter.api.Test;

class DigestTest {

  private static final String HEX = "fddad61bdcb73ef97c2d0bd75e51e51585c62e4893c31f0b30bd6344e7c9d53a";

  @Test
  void onlySixtyFourLowerCaseHexDigitsAreADigest() {
    assertEquals("sha256:" + HEX, Digest.parse("sha256:" + HEX).toString());
    assertEquals(new Digest(HEX), Digest.fromBytes(new Digest(HEX).toBytes()));
    for (String bad : new String[] {HEX.toUpperCase(), HEX.substring(1), HEX + "0", HEX.replace('f', 'g'),
        HEX.substring(0, 63) + "/", HEX.substring(0, 63) + ":", HEX.substring(0, 63) + "`", ""}) {
      assertThrows(IllegalArgumentException.class, () -> new Digest(bad), bad);
    }
    assertThrows(IllegalArgumentException.class, () -> new Digest(null));
  }
}
