package dev.thaw.examples.safetensors;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class SafetensorsFileTest {

  @TempDir Path dir;

  private static ByteBuffer floats(float... v) {
    ByteBuffer b = ByteBuffer.allocate(4 * v.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float f : v) {
      b.putFloat(f);
    }
    return b.flip();
  }

  @Test
  void writtenTensorsReadBackWithShapesMetadataAndBytes() throws IOException {
    Path file = dir.resolve("m.safetensors");
    ByteBuffer halves = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
    for (short s = 1; s <= 6; s++) {
      halves.putShort(s);
    }
    new SafetensorsWriter().metadata("format", "pt")
        .add("a", DType.F32, new long[] {2, 2}, floats(1, 2, 3, 4))
        .add("b.weight", DType.F16, new long[] {3, 2}, halves.flip())
        .add("scalar", DType.I64, new long[] {}, ByteBuffer.allocate(8).putLong(0, 7L))
        .add("empty", DType.F32, new long[] {0, 5}, ByteBuffer.allocate(0))
        .write(file);
    try (SafetensorsFile f = SafetensorsFile.open(file)) {
      assertEquals(Map.of("format", "pt"), f.metadata());
      assertEquals(List.of("a", "b.weight", "scalar", "empty"), List.copyOf(f.tensors().keySet()));
      TensorInfo a = f.tensor("a").orElseThrow();
      assertEquals(List.of(2L, 2L), a.shape());
      assertEquals(4, a.elements());
      ByteBuffer ab = f.readDirect(a);
      assertTrue(ab.isDirect());
      assertEquals(3f, ab.getFloat(8));
      TensorInfo b = f.tensor("b.weight").orElseThrow();
      assertEquals(DType.F16, b.dtype());
      ByteBuffer part = ByteBuffer.allocateDirect(4).order(ByteOrder.LITTLE_ENDIAN);
      f.read(b, 6, part);
      assertEquals(4, part.getShort(0));
      assertEquals(5, part.getShort(2));
      assertEquals(1, f.tensor("scalar").orElseThrow().elements());
      assertEquals(0, f.tensor("empty").orElseThrow().byteSize());
      assertEquals(0, (f.dataStart() - 8) % 8, "header padded to 8 bytes");
      assertThrows(IllegalArgumentException.class, () -> f.read(b, 10, ByteBuffer.allocate(4)));
      assertFalse(f.tensor("missing").isPresent());
    }
  }

  @Test
  void writerRefusesDataOfTheWrongSizeAndLeavesNoFile() {
    Path file = dir.resolve("bad.safetensors");
    SafetensorsWriter w = new SafetensorsWriter().add("a", DType.F32, new long[] {3}, floats(1, 2));
    IllegalStateException e = assertThrows(IllegalStateException.class, () -> w.write(file));
    assertTrue(e.getMessage().contains("'a'"), e.getMessage());
    assertFalse(Files.exists(file));
    assertFalse(Files.exists(dir.resolve("bad.safetensors.tmp")));
  }

  // ---- hostile files ----

  private Path raw(long headerLength, String header, int dataBytes) throws IOException {
    byte[] h = header.getBytes(StandardCharsets.UTF_8);
    ByteBuffer b = ByteBuffer.allocate(8 + h.length + dataBytes).order(ByteOrder.LITTLE_ENDIAN);
    b.putLong(headerLength).put(h);
    Path p = Files.createTempFile(dir, "hostile", ".safetensors");
    Files.write(p, b.array());
    return p;
  }

  private Path raw(String header, int dataBytes) throws IOException {
    return raw(header.getBytes(StandardCharsets.UTF_8).length, header, dataBytes);
  }

  private String refusal(Path p) {
    return assertThrows(SafetensorsException.class, () -> SafetensorsFile.open(p).close()).getMessage();
  }

  private static void assertMentions(String message, String... parts) {
    for (String part : parts) {
      assertTrue(message.contains(part), () -> "'" + message + "' should mention '" + part + "'");
    }
  }

  @Test
  void refusesHeaderLengthsBeyondTheFileOrAbsurd() throws IOException {
    assertMentions(refusal(raw(1000, "{}", 0)), "header of 1000 bytes", "only 2 bytes follow");
    assertMentions(refusal(raw(200_000_000L, "{}", 0)), "200000000");
    assertMentions(refusal(raw(-1L, "{}", 0)), "18446744073709551615");
    Path shortFile = Files.write(dir.resolve("short.safetensors"), new byte[] {1, 2, 3});
    assertMentions(refusal(shortFile), "shorter than the 8-byte header length");
  }

  @Test
  void refusesHeadersThatAreNotAJsonTensorTable() throws IOException {
    assertMentions(refusal(raw("{not json", 0)), "not JSON");
    assertMentions(refusal(raw("[1, 2]", 0)), "not a JSON object");
    assertMentions(refusal(raw("{\"a\": 3}", 0)), "tensor 'a'", "not an object");
    assertMentions(refusal(raw("{\"__metadata__\": {\"k\": 1}}", 0)), "__metadata__.k");
    assertMentions(refusal(raw(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            + "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8)), "Duplicate field 'a'");
  }

  @Test
  void refusesUnknownDtypesAndBadShapes() throws IOException {
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4)),
        "tensor 'w'", "unknown dtype 'F17'");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,4]}}", 4)),
        "tensor 'w'", "negative dimension -3");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8)),
        "tensor 'w'", "not an integer");
    assertMentions(refusal(raw(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4)),
        "tensor 'w'", "overflows");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4)), "tensor 'w'",
        "no shape");
  }

  @Test
  void refusesOffsetsOutOfRangeMisSizedOverlappingOrWithHoles() throws IOException {
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8)),
        "tensor 'w'", "outside the data section of 8 bytes");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,4]}}", 8)),
        "tensor 'w'", "[8, 4]");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8)),
        "tensor 'w'", "8 bytes of data", "needs 6");
    assertMentions(refusal(raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4)),
        "tensor 'w'", "data_offsets");
    assertMentions(refusal(raw(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            + "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12)),
        "tensor 'b'", "overlaps tensor 'a'");
    assertMentions(refusal(raw(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            + "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12)),
        "tensor 'b'", "hole");
    assertMentions(refusal(raw("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12)),
        "cover 4 bytes of a 12-byte data section");
  }

  @Test
  void aFileTruncatedAfterOpeningFailsTheReadNotTheProcess() throws IOException {
    Path file = dir.resolve("t.safetensors");
    new SafetensorsWriter().add("a", DType.F32, new long[] {4}, floats(1, 2, 3, 4)).write(file);
    try (SafetensorsFile f = SafetensorsFile.open(file)) {
      try (var ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
        ch.truncate(f.dataStart() + 8);
      }
      IOException e = assertThrows(IOException.class, () -> f.readDirect(f.tensor("a").orElseThrow()));
      assertMentions(e.getMessage(), "before the 8 bytes");
    }
  }

  @Test
  void readsIntoTheCallersBufferAtItsPosition() throws IOException {
    Path file = dir.resolve("p.safetensors");
    new SafetensorsWriter().add("a", DType.F32, new long[] {2}, floats(5, 6)).write(file);
    try (SafetensorsFile f = SafetensorsFile.open(file)) {
      ByteBuffer dst = ByteBuffer.allocateDirect(12).order(ByteOrder.LITTLE_ENDIAN);
      dst.position(4);
      f.read(f.tensor("a").orElseThrow(), 0, dst);
      assertEquals(12, dst.position());
      assertArrayEquals(new float[] {5, 6}, new float[] {dst.getFloat(4), dst.getFloat(8)});
    }
  }
}
