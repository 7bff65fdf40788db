package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.BigIntegerNode;
import com.fasterxml.jackson.databind.node.BooleanNode;
import com.fasterxml.jackson.databind.node.DoubleNode;
import com.fasterxml.jackson.databind.node.FloatNode;
import com.fasterxml.jackson.databind.node.IntNode;
import com.fasterxml.jackson.databind.node.LongNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.io.ByteArrayOutputStream;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The elements of a KServe v2 tensor by datatype: which JSON values a datatype holds, and the binary tensor data
 * extension's layout (little-endian, row-major, no padding; {@code BOOL} one byte 0 or 1; {@code FP16} IEEE half,
 * {@code BF16} the upper half of an FP32; {@code BYTES} each element a 4-byte little-endian length and that many
 * bytes). A function's tensors are JSON, so binary elements become JSON values here and back: {@code BYTES} elements
 * are UTF-8 text, and floating-point elements are finite (JSON has no NaN or infinity).
 */
final class TensorData {

  private static final BigInteger UINT64_MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

  private TensorData() {}

  /** Bytes per element; -1 for {@code BYTES}, whose elements carry their own length. */
  static int elementBytes(String datatype) {
    return switch (datatype) {
      case "BOOL", "INT8", "UINT8" -> 1;
      case "INT16", "UINT16", "FP16", "BF16" -> 2;
      case "INT32", "UINT32", "FP32" -> 4;
      case "INT64", "UINT64", "FP64" -> 8;
      case "BYTES" -> -1;
      default -> throw new IllegalArgumentException("'" + datatype + "' is not a v2 datatype");
    };
  }

  /** True when {@code v} is a value of {@code datatype}: a boolean, an integer in range, a number, a string. */
  static boolean holds(String datatype, JsonNode v) {
    return switch (datatype) {
      case "BOOL" -> v.isBoolean();
      case "FP16", "FP32", "FP64", "BF16" -> v.isNumber();
      case "BYTES" -> v.isTextual();
      case "UINT64" -> v.isIntegralNumber() && v.bigIntegerValue().signum() >= 0
          && v.bigIntegerValue().compareTo(UINT64_MAX) <= 0;
      default -> v.isIntegralNumber() && v.canConvertToLong() && inRange(datatype, v.longValue());
    };
  }

  private static boolean inRange(String datatype, long v) {
    return switch (datatype) {
      case "INT8" -> v >= Byte.MIN_VALUE && v <= Byte.MAX_VALUE;
      case "UINT8" -> v >= 0 && v <= 0xff;
      case "INT16" -> v >= Short.MIN_VALUE && v <= Short.MAX_VALUE;
      case "UINT16" -> v >= 0 && v <= 0xffff;
      case "INT32" -> v >= Integer.MIN_VALUE && v <= Integer.MAX_VALUE;
      case "UINT32" -> v >= 0 && v <= 0xffffffffL;
      default -> true;
    };
  }

  /**
   * The {@code elements} elements of {@code datatype} that {@code bytes} holds, all of it.
   *
   * @throws IllegalArgumentException naming what does not fit: a size that is not the elements' size, a BOOL byte
   *     other than 0 or 1, a non-finite float, BYTES that are not UTF-8 or run past the end
   */
  static List<JsonNode> decode(ByteBuffer bytes, String datatype, long elements) {
    ByteBuffer b = bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    int size = elementBytes(datatype);
    if (size > 0 && b.remaining() != elements * size) {
      throw new IllegalArgumentException(b.remaining() + " bytes are not " + elements + " " + datatype + " elements ("
          + elements * size + " bytes)");
    }
    List<JsonNode> out = new ArrayList<>((int) Math.min(elements, 1 << 16));
    for (long i = 0; i < elements; i++) {
      out.add(switch (datatype) {
        case "BOOL" -> bool(b.get(), i);
        case "INT8" -> IntNode.valueOf(b.get());
        case "UINT8" -> IntNode.valueOf(b.get() & 0xff);
        case "INT16" -> IntNode.valueOf(b.getShort());
        case "UINT16" -> IntNode.valueOf(b.getShort() & 0xffff);
        case "INT32" -> IntNode.valueOf(b.getInt());
        case "UINT32" -> LongNode.valueOf(b.getInt() & 0xffffffffL);
        case "INT64" -> LongNode.valueOf(b.getLong());
        case "UINT64" -> unsigned(b.getLong());
        case "FP16" -> FloatNode.valueOf(finite(halfToFloat(b.getShort()), i));
        case "BF16" -> FloatNode.valueOf(finite(Float.intBitsToFloat((b.getShort() & 0xffff) << 16), i));
        case "FP32" -> FloatNode.valueOf(finite(b.getFloat(), i));
        case "FP64" -> DoubleNode.valueOf(finite(b.getDouble(), i));
        default -> text(b, i);
      });
    }
    if (b.hasRemaining()) {
      throw new IllegalArgumentException(b.remaining() + " bytes are left after " + elements + " BYTES elements");
    }
    return out;
  }

  /**
   * How many length-prefixed {@code BYTES} elements {@code bytes} holds, for a request that gives no shape.
   *
   * @throws IllegalArgumentException if a length runs past the end
   */
  static long countBytesElements(ByteBuffer bytes) {
    ByteBuffer b = bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    long n = 0;
    while (b.hasRemaining()) {
      skipText(b, n++);
    }
    return n;
  }

  /**
   * {@code flat}'s elements as {@code datatype}'s bytes.
   *
   * @throws IllegalArgumentException naming the first element that is not a value of {@code datatype}
   */
  static byte[] encode(List<JsonNode> flat, String datatype) {
    int size = elementBytes(datatype);
    ByteArrayOutputStream text = size < 0 ? new ByteArrayOutputStream() : null;
    ByteBuffer b = size < 0 ? null : ByteBuffer.allocate(flat.size() * size).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < flat.size(); i++) {
      JsonNode v = flat.get(i);
      if (!holds(datatype, v)) {
        throw new IllegalArgumentException("element " + i + " (" + v + ") is not " + datatype);
      }
      switch (datatype) {
        case "BOOL" -> b.put((byte) (v.booleanValue() ? 1 : 0));
        case "INT8", "UINT8" -> b.put((byte) v.longValue());
        case "INT16", "UINT16" -> b.putShort((short) v.longValue());
        case "INT32", "UINT32" -> b.putInt((int) v.longValue());
        case "INT64" -> b.putLong(v.longValue());
        case "UINT64" -> b.putLong(v.bigIntegerValue().longValue());
        case "FP16" -> b.putShort(floatToHalf(v.floatValue()));
        case "BF16" -> b.putShort(floatToBf16(v.floatValue()));
        case "FP32" -> b.putFloat(v.floatValue());
        case "FP64" -> b.putDouble(v.doubleValue());
        default -> {
          byte[] utf8 = v.textValue().getBytes(StandardCharsets.UTF_8);
          text.writeBytes(ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(utf8.length).array());
          text.writeBytes(utf8);
        }
      }
    }
    return size < 0 ? text.toByteArray() : b.array();
  }

  private static JsonNode bool(byte v, long i) {
    if (v != 0 && v != 1) {
      throw new IllegalArgumentException("BOOL element " + i + " is the byte " + v + ", not 0 or 1");
    }
    return BooleanNode.valueOf(v == 1);
  }

  private static JsonNode unsigned(long v) {
    return v >= 0 ? LongNode.valueOf(v) : BigIntegerNode.valueOf(new BigInteger(Long.toUnsignedString(v)));
  }

  private static float finite(float v, long i) {
    if (!Float.isFinite(v)) {
      throw new IllegalArgumentException("element " + i + " is " + v + ", which JSON cannot carry to the function");
    }
    return v;
  }

  private static double finite(double v, long i) {
    if (!Double.isFinite(v)) {
      throw new IllegalArgumentException("element " + i + " is " + v + ", which JSON cannot carry to the function");
    }
    return v;
  }

  private static int textLength(ByteBuffer b, long i) {
    if (b.remaining() < 4) {
      throw new IllegalArgumentException("BYTES element " + i + " has no 4-byte length: " + b.remaining()
          + " bytes are left");
    }
    long length = b.getInt() & 0xffffffffL;
    if (length > b.remaining()) {
      throw new IllegalArgumentException("BYTES element " + i + " says " + length + " bytes; " + b.remaining()
          + " are left");
    }
    return (int) length;
  }

  private static void skipText(ByteBuffer b, long i) {
    int length = textLength(b, i);
    b.position(b.position() + length);
  }

  private static JsonNode text(ByteBuffer b, long i) {
    int length = textLength(b, i);
    ByteBuffer utf8 = b.slice(b.position(), length);
    b.position(b.position() + length);
    try {
      return TextNode.valueOf(StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT).decode(utf8).toString());
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException("BYTES element " + i + " is not UTF-8 text, which the function's JSON "
          + "needs");
    }
  }

  /** IEEE 754 binary16 to float, exactly (every half is a float). */
  static float halfToFloat(short h) {
    int bits = h & 0xffff;
    int sign = (bits & 0x8000) << 16;
    int exponent = (bits >>> 10) & 0x1f;
    int mantissa = bits & 0x3ff;
    if (exponent == 0x1f) {
      return Float.intBitsToFloat(sign | 0x7f800000 | mantissa << 13);
    }
    if (exponent == 0) {
      float v = mantissa * 0x1p-24f;
      return sign == 0 ? v : -v;
    }
    return Float.intBitsToFloat(sign | (exponent + 112) << 23 | mantissa << 13);
  }

  /** Float to IEEE 754 binary16, rounded to nearest even; beyond the half range, infinity. */
  static short floatToHalf(float f) {
    int bits = Float.floatToRawIntBits(f);
    int sign = (bits >>> 16) & 0x8000;
    int abs = bits & 0x7fffffff;
    if (abs > 0x7f800000) {
      return (short) (sign | 0x7e00);
    }
    if (abs >= 0x47800000) {
      return (short) (sign | 0x7c00);
    }
    if (abs >= 0x38800000) {
      int mantissa = abs & 0x7fffff;
      int h = ((abs >>> 23) - 112) << 10 | mantissa >>> 13;
      int rest = mantissa & 0x1fff;
      if (rest > 0x1000 || rest == 0x1000 && (h & 1) != 0) {
        h++;
      }
      return (short) (sign | h);
    }
    // Below the smallest normal half: a multiple of 2^-24 (exact in float: scaling by a power of two).
    return (short) (sign | (int) Math.rint(Float.intBitsToFloat(abs) * 0x1p24f));
  }

  /** Float to bfloat16 (its upper 16 bits), rounded to nearest even. */
  static short floatToBf16(float f) {
    int bits = Float.floatToRawIntBits(f);
    if (Float.isNaN(f)) {
      return (short) (bits >>> 16 | 0x40);
    }
    return (short) ((bits + 0x7fff + (bits >>> 16 & 1)) >>> 16);
  }
}
