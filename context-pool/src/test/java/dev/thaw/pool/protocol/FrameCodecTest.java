package dev.thaw.pool.protocol;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** Pins the wire format: frames round-trip, and every kind of garbage is refused by name without waiting. */
class FrameCodecTest {

  private static byte[] encode(Frame f) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    FrameCodec.write(out, f);
    return out.toByteArray();
  }

  private static Frame decode(byte[] b, int max) throws Exception {
    return FrameCodec.read(new ByteArrayInputStream(b), max);
  }

  private static ProtocolException refused(byte[] b) {
    return assertThrows(ProtocolException.class, () -> decode(b, 1024));
  }

  @Test
  void framesRoundTripBackToBack() throws Exception {
    Frame a = new Frame(FrameType.INVOKE, 7, FrameCodec.head().put("jsonBytes", 2), new byte[] {'{', '}', 1, 2});
    Frame b = new Frame(FrameType.STATUS, 8, FrameCodec.head());
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    FrameCodec.write(out, a);
    FrameCodec.write(out, b);
    ByteArrayInputStream in = new ByteArrayInputStream(out.toByteArray());
    Frame a2 = FrameCodec.read(in, 1024);
    Frame b2 = FrameCodec.read(in, 1024);
    assertEquals(FrameType.INVOKE, a2.type());
    assertEquals(7, a2.id());
    assertEquals(2, a2.head().get("jsonBytes").asInt());
    assertArrayEquals(a.body(), a2.body());
    assertEquals(FrameType.STATUS, b2.type());
    assertEquals(0, b2.body().length);
    assertThrows(EOFException.class, () -> FrameCodec.read(in, 1024), "clean end between frames");
  }

  @Test
  void garbageIsRefusedNamingWhatWasWrong() throws Exception {
    byte[] good = encode(new Frame(FrameType.BECOME, 1, FrameCodec.head().put("name", "x"), new byte[100]));

    assertTrue(refused("hello, this is not a frame".getBytes(StandardCharsets.US_ASCII)).getMessage()
        .contains("magic"));
    byte[] version = good.clone();
    version[2] = 9;
    assertTrue(refused(version).getMessage().contains("version 9"));
    byte[] type = good.clone();
    type[3] = 99;
    assertTrue(refused(type).getMessage().contains("unknown frame type 99"));
    byte[] huge = good.clone();
    ByteBuffer.wrap(huge).putInt(12, 1 << 30);
    assertTrue(refused(huge).getMessage().contains("body length"), "an oversized body is refused before reading");
    byte[] negative = good.clone();
    ByteBuffer.wrap(negative).putInt(8, -5);
    assertTrue(refused(negative).getMessage().contains("head length"));
    assertTrue(refused(Arrays.copyOf(good, good.length - 1)).getMessage().contains("ended inside"),
        "a truncated frame is refused, not waited on");
    assertTrue(refused(Arrays.copyOf(good, 9)).getMessage().contains("header"));

    byte[] notJson = encode(new Frame(FrameType.STATUS, 1, FrameCodec.head().put("k", "vvvv")));
    notJson[FrameCodec.HEADER_BYTES] = '#';
    assertTrue(refused(notJson).getMessage().contains("not JSON"));
    ByteArrayOutputStream arrayHead = new ByteArrayOutputStream();
    arrayHead.write(ByteBuffer.allocate(16).putShort((short) FrameCodec.MAGIC).put((byte) FrameCodec.VERSION)
        .put((byte) 4).putInt(1).putInt(2).putInt(0).array());
    arrayHead.write("[]".getBytes(StandardCharsets.US_ASCII));
    assertTrue(refused(arrayHead.toByteArray()).getMessage().contains("not a JSON object"));
  }
}
