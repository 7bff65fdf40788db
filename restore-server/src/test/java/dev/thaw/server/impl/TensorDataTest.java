package dev.thaw.server.impl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The binary tensor data extension's element layout, datatype by datatype: bytes decode to the JSON values a
 * function's tensors hold and encode back to the same bytes; IEEE half and bfloat16 round to nearest even; what no
 * datatype holds is refused.
 */
class TensorDataTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void everyHalfConvertsToAFloatAndBackToItself() {
    for (int bits = 0; bits <= 0xffff; bits++) {
      float f = TensorData.halfToFloat((short) bits);
      int back = TensorData.floatToHalf(f) & 0xffff;
      if (Float.isNaN(f)) {
        assertTrue((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0, "NaN stays NaN: " + Integer.toHexString(bits));
      } else {
        assertEquals(bits, back, Integer.toHexString(bits) + " = " + f);
      }
    }
    assertEquals(1.0f, TensorData.halfToFloat((short) 0x3c00));
    assertEquals(65504f, TensorData.halfToFloat((short) 0x7bff));
    assertEquals(0x1p-24f, TensorData.halfToFloat((short) 0x0001));
  }

  @Test
  void floatsRoundToTheNearestHalfTiesToEvenAndOverflowToInfinity() {
    assertEquals(0x3c00, TensorData.floatToHalf(1.0f + 0x1p-11f), "a tie between 1 and its next half: to even 1");
    assertEquals(0x3c02, TensorData.floatToHalf(1.0f + 3 * 0x1p-11f), "a tie: to even, upward");
    assertEquals(0x3c01, TensorData.floatToHalf(1.0f + 0x1p-11f + 0x1p-20f), "just above the tie: up");
    assertEquals(0x7bff, TensorData.floatToHalf(65519f));
    assertEquals(0x7c00, TensorData.floatToHalf(65520f), "the tie above the largest half: infinity");
    assertEquals((short) 0xfc00, TensorData.floatToHalf(-1e9f));
    assertEquals(0x0000, TensorData.floatToHalf(0x1p-26f), "below half the smallest subnormal: zero");
    assertEquals(0x0001, TensorData.floatToHalf(0x1p-25f + 0x1p-30f));
    assertEquals(0x0400, TensorData.floatToHalf(0x1p-14f - 0x1p-26f), "rounds up into the smallest normal");
  }

  @Test
  void bfloat16IsTheUpperHalfOfAFloatRoundedToNearestEven() {
    assertEquals(0x3f80, TensorData.floatToBf16(1.0f));
    assertEquals(0x3f80, TensorData.floatToBf16(Float.intBitsToFloat(0x3f808000)), "a tie: to even");
    assertEquals(0x3f82, TensorData.floatToBf16(Float.intBitsToFloat(0x3f818000)), "a tie: to even, upward");
    assertEquals(0x3f81, TensorData.floatToBf16(Float.intBitsToFloat(0x3f808001)));
    assertTrue(Float.isNaN(Float.intBitsToFloat(TensorData.floatToBf16(Float.NaN) << 16)));
  }

  @Test
  void everyDatatypeDecodesToJsonAndEncodesBackToTheSameBytes() throws Exception {
    roundTrip("BOOL", "[true, false]", new byte[] {1, 0});
    roundTrip("INT8", "[-128, 127]", new byte[] {-128, 127});
    roundTrip("UINT8", "[0, 255]", new byte[] {0, -1});
    roundTrip("INT16", "[-32768, 1]", le(4).putShort((short) -32768).putShort((short) 1).array());
    roundTrip("UINT16", "[65535]", le(2).putShort((short) -1).array());
    roundTrip("INT32", "[-2147483648]", le(4).putInt(Integer.MIN_VALUE).array());
    roundTrip("UINT32", "[4294967295]", le(4).putInt(-1).array());
    roundTrip("INT64", "[-9223372036854775808]", le(8).putLong(Long.MIN_VALUE).array());
    roundTrip("UINT64", "[18446744073709551615, 7]", le(16).putLong(-1).putLong(7).array());
    roundTrip("FP16", "[1.0, -2.0]", le(4).putShort((short) 0x3c00).putShort((short) 0xc000).array());
    roundTrip("BF16", "[1.0]", le(2).putShort((short) 0x3f80).array());
    roundTrip("FP32", "[1.5, -0.25]", le(8).putFloat(1.5f).putFloat(-0.25f).array());
    roundTrip("FP64", "[0.1]", le(8).putDouble(0.1).array());
    roundTrip("BYTES", "[\"ab\", \"\"]", le(10).putInt(2).put((byte) 'a').put((byte) 'b').putInt(0).array());
  }

  @Test
  void whatADatatypeDoesNotHoldIsRefused() throws Exception {
    assertFalse(TensorData.holds("INT8", JSON.readTree("128")));
    assertFalse(TensorData.holds("UINT8", JSON.readTree("-1")));
    assertFalse(TensorData.holds("UINT64", JSON.readTree("18446744073709551616")));
    assertFalse(TensorData.holds("INT64", JSON.readTree("9223372036854775808")));
    assertFalse(TensorData.holds("INT32", JSON.readTree("1.5")));
    assertFalse(TensorData.holds("BOOL", JSON.readTree("1")));
    assertFalse(TensorData.holds("BYTES", JSON.readTree("1")));
    assertFalse(TensorData.holds("FP32", JSON.readTree("\"1\"")));
    assertTrue(TensorData.holds("UINT64", JSON.readTree("18446744073709551615")));

    assertThrows(IllegalArgumentException.class, () -> TensorData.decode(ByteBuffer.wrap(new byte[3]), "FP32", 1));
    assertThrows(IllegalArgumentException.class, () -> TensorData.decode(ByteBuffer.wrap(new byte[] {2}), "BOOL", 1));
    assertThrows(IllegalArgumentException.class,
        () -> TensorData.decode(ByteBuffer.wrap(le(4).putFloat(Float.POSITIVE_INFINITY).array()), "FP32", 1));
    assertThrows(IllegalArgumentException.class,
        () -> TensorData.decode(ByteBuffer.wrap(le(5).putInt(5).put((byte) 'a').array()), "BYTES", 1));
    assertThrows(IllegalArgumentException.class,
        () -> TensorData.decode(ByteBuffer.wrap(le(6).putInt(0).putShort((short) 0).array()), "BYTES", 1));
    assertThrows(IllegalArgumentException.class, () -> TensorData.encode(List.of(JSON.readTree("300")), "UINT8"));
    assertEquals(3, TensorData.countBytesElements(ByteBuffer.wrap(le(13).putInt(1).put((byte) 'x').putInt(0)
        .putInt(0).array())));
  }

  private static void roundTrip(String datatype, String json, byte[] bytes) throws Exception {
    JsonNode values = JSON.readTree(json);
    List<JsonNode> decoded = TensorData.decode(ByteBuffer.wrap(bytes), datatype, values.size());
    assertEquals(values.size(), decoded.size(), datatype);
    for (int i = 0; i < decoded.size(); i++) {
      assertTrue(values.get(i).equals(decoded.get(i)) || values.get(i).isNumber()
          && values.get(i).decimalValue().compareTo(decoded.get(i).decimalValue()) == 0,
          datatype + " element " + i + ": " + decoded.get(i) + " for " + values.get(i));
    }
    assertArrayEquals(bytes, TensorData.encode(decoded, datatype), datatype + " back to its bytes");
    List<JsonNode> fromJson = new ArrayList<>();
    values.forEach(fromJson::add);
    assertArrayEquals(bytes, TensorData.encode(fromJson, datatype), datatype + " from JSON");
  }

  private static ByteBuffer le(int size) {
    return ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
  }
}
