package dev.thaw.pool.protocol;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;

/**
 * The wire format of the worker protocol, version {@value #VERSION}. Every frame is
 *
 * <pre>
 *   u16 magic 0x5457 ("TW")   u8 version   u8 type   i32 id   i32 headLength   i32 bodyLength
 *   head: headLength bytes of UTF-8 JSON (an object)
 *   body: bodyLength bytes
 * </pre>
 *
 * big-endian. A reader refuses, with a {@link ProtocolException} naming what it saw, a wrong magic or version,
 * an unknown type, a negative or oversized length, a head that is not a JSON object, and a stream that ends
 * inside a frame; it never waits for bytes a header did not promise. A stream that ends cleanly between frames
 * is {@link EOFException}. After a protocol error the stream is out of step and must be closed.
 */
public final class FrameCodec {

  public static final int MAGIC = 0x5457;
  public static final int VERSION = 7;
  public static final int HEADER_BYTES = 16;
  /** Heads carry control fields only. */
  public static final int MAX_HEAD_BYTES = 1 << 20;

  static final ObjectMapper JSON = new ObjectMapper();

  private FrameCodec() {}

  /** Writes one frame and flushes. Not thread-safe: callers serialize writes to one stream. */
  public static void write(OutputStream out, Frame f) throws IOException {
    write(out, f, true);
  }

  /**
   * Writes one frame, and flushes when {@code flush} (a writer sending several frames at once flushes after the last).
   * Not thread-safe: callers serialize writes to one stream.
   */
  public static void write(OutputStream out, Frame f, boolean flush) throws IOException {
    byte[] head = JSON.writeValueAsBytes(f.head());
    ByteBuffer h = ByteBuffer.allocate(HEADER_BYTES);
    h.putShort((short) MAGIC).put((byte) VERSION).put((byte) f.type().code()).putInt(f.id()).putInt(head.length)
        .putInt(f.body().length);
    out.write(h.array());
    out.write(head);
    out.write(f.body());
    if (flush) {
      out.flush();
    }
  }

  /**
   * Reads one frame.
   *
   * @param maxBodyBytes the largest body accepted
   * @throws EOFException if the stream ends before the first byte of a frame
   * @throws ProtocolException if the bytes are not a frame
   */
  public static Frame read(InputStream in, int maxBodyBytes) throws IOException {
    DataInputStream d = in instanceof DataInputStream di ? di : new DataInputStream(in);
    byte[] header = new byte[HEADER_BYTES];
    int first = d.read();
    if (first < 0) {
      throw new EOFException("end of stream");
    }
    header[0] = (byte) first;
    readFully(d, header, 1, HEADER_BYTES - 1, "header");
    ByteBuffer h = ByteBuffer.wrap(header);
    int magic = h.getShort() & 0xffff;
    if (magic != MAGIC) {
      throw new ProtocolException(String.format("not a frame: magic 0x%04x, expected 0x%04x (first bytes: %s)",
          magic, MAGIC, printable(header)));
    }
    int version = h.get() & 0xff;
    if (version != VERSION) {
      throw new ProtocolException("protocol version " + version + ", this side speaks " + VERSION);
    }
    int code = h.get() & 0xff;
    FrameType type = FrameType.of(code);
    if (type == null) {
      throw new ProtocolException("unknown frame type " + code);
    }
    int id = h.getInt();
    int headLength = h.getInt();
    int bodyLength = h.getInt();
    if (headLength < 2 || headLength > MAX_HEAD_BYTES) {
      throw new ProtocolException("head length " + headLength + " outside 2.." + MAX_HEAD_BYTES);
    }
    if (bodyLength < 0 || bodyLength > maxBodyBytes) {
      throw new ProtocolException("body length " + bodyLength + " outside 0.." + maxBodyBytes);
    }
    byte[] headBytes = new byte[headLength];
    readFully(d, headBytes, 0, headLength, "head");
    JsonNode head;
    try {
      head = JSON.readTree(headBytes);
    } catch (JsonProcessingException e) {
      throw new ProtocolException(type + " head is not JSON: " + e.getOriginalMessage());
    }
    if (!(head instanceof ObjectNode o)) {
      throw new ProtocolException(type + " head is not a JSON object");
    }
    byte[] body = new byte[bodyLength];
    readFully(d, body, 0, bodyLength, "body");
    return new Frame(type, id, o, body);
  }

  /** A fresh, empty head. */
  public static ObjectNode head() {
    return JSON.createObjectNode();
  }

  public static ObjectMapper json() {
    return JSON;
  }

  private static void readFully(DataInputStream d, byte[] b, int off, int len, String part) throws IOException {
    try {
      d.readFully(b, off, len);
    } catch (EOFException e) {
      throw new ProtocolException("stream ended inside a frame's " + part);
    }
  }

  private static String printable(byte[] b) {
    StringBuilder s = new StringBuilder("\"");
    for (byte x : b) {
      s.append(x >= 0x20 && x < 0x7f ? String.valueOf((char) x) : String.format("\\x%02x", x & 0xff));
    }
    return s.append('"').toString();
  }
}
