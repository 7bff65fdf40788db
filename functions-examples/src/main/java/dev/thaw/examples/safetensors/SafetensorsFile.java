package dev.thaw.examples.safetensors;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A safetensors file opened for reading: the header parsed and checked, tensor bytes read on demand.
 *
 * <h2>Format</h2>
 * An 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section. The JSON is an object:
 * each key but {@code __metadata__} names a tensor as {@code {"dtype": "F16", "shape": [768, 2304],
 * "data_offsets": [begin, end]}}, offsets relative to the data section; {@code __metadata__} maps strings to
 * strings.
 *
 * <h2>What is checked at {@link #open}</h2>
 * Everything a hostile file could use to make a reader go wrong, each as a {@link SafetensorsException} that
 * names the tensor: a header length beyond the file or above {@link #MAX_HEADER_BYTES}; a header that is not
 * UTF-8 JSON, has duplicate keys or is not an object; an unknown dtype; a shape that is not a list of
 * non-negative integers or whose byte size overflows; offsets that are not two integers with
 * {@code 0 ≤ begin ≤ end ≤ data size}; a byte size that is not elements × dtype width; tensors that overlap, or
 * leave holes in the data section, or do not cover it to its end (the format's rule, which also rejects
 * trailing bytes).
 *
 * <h2>Reading</h2>
 * Tensor bytes are read with positional {@link FileChannel} reads straight into the caller's buffer, so a
 * 3 GB file never passes through the heap; {@link #read(TensorInfo, long, ByteBuffer)} reads a part of a
 * tensor, for streaming through a bounded staging buffer. The file may be read from several threads.
 */
public final class SafetensorsFile implements AutoCloseable {

  /** Headers longer than this are refused (the reference implementation's limit). */
  public static final long MAX_HEADER_BYTES = 100L * 1000 * 1000;

  public static final String METADATA_KEY = "__metadata__";

  private static final ObjectMapper JSON = new ObjectMapper()
      .enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

  private final Path path;
  private final FileChannel channel;
  private final long dataStart;
  private final Map<String, String> metadata;
  private final Map<String, TensorInfo> tensors;

  private SafetensorsFile(Path path, FileChannel channel, long dataStart, Map<String, String> metadata,
      Map<String, TensorInfo> tensors) {
    this.path = path;
    this.channel = channel;
    this.dataStart = dataStart;
    this.metadata = metadata;
    this.tensors = tensors;
  }

  /**
   * Opens and checks {@code path}.
   *
   * @throws SafetensorsException if the file is not a valid safetensors file, saying where and why
   * @throws IOException if it cannot be read
   */
  public static SafetensorsFile open(Path path) throws IOException {
    FileChannel channel = FileChannel.open(path, StandardOpenOption.READ);
    try {
      long fileSize = channel.size();
      if (fileSize < 8) {
        throw fail(path, "is " + fileSize + " bytes, shorter than the 8-byte header length");
      }
      ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
      readFully(channel, len, 0, path);
      long headerLength = len.getLong(0);
      if (headerLength < 2 || headerLength > MAX_HEADER_BYTES) {
        throw fail(path, "declares a header of " + Long.toUnsignedString(headerLength) + " bytes; a header is "
            + "2 to " + MAX_HEADER_BYTES + " bytes");
      }
      if (headerLength > fileSize - 8) {
        throw fail(path, "declares a header of " + headerLength + " bytes but only " + (fileSize - 8)
            + " bytes follow the length");
      }
      ByteBuffer header = ByteBuffer.allocate((int) headerLength);
      readFully(channel, header, 8, path);
      long dataStart = 8 + headerLength;
      Header parsed = parseHeader(path, header.flip(), fileSize - dataStart);
      return new SafetensorsFile(path, channel, dataStart, parsed.metadata, parsed.tensors);
    } catch (IOException | RuntimeException e) {
      channel.close();
      throw e;
    }
  }

  private record Header(Map<String, String> metadata, Map<String, TensorInfo> tensors) {}

  private static Header parseHeader(Path path, ByteBuffer bytes, long dataSize) throws SafetensorsException {
    String text;
    try {
      text = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT).decode(bytes).toString();
    } catch (CharacterCodingException e) {
      throw fail(path, "has a header that is not UTF-8");
    }
    JsonNode root;
    try {
      root = JSON.readTree(text);
    } catch (JsonProcessingException e) {
      throw new SafetensorsException(path + ": the header is not JSON: " + e.getOriginalMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw fail(path, "has a header that is not a JSON object");
    }
    Map<String, String> metadata = Map.of();
    Map<String, TensorInfo> tensors = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = root.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (e.getKey().equals(METADATA_KEY)) {
        metadata = parseMetadata(path, e.getValue());
      } else {
        tensors.put(e.getKey(), parseTensor(path, e.getKey(), e.getValue(), dataSize));
      }
    }
    checkLayout(path, tensors.values(), dataSize);
    return new Header(metadata, Collections.unmodifiableMap(tensors));
  }

  private static Map<String, String> parseMetadata(Path path, JsonNode node) throws SafetensorsException {
    if (!node.isObject()) {
      throw fail(path, METADATA_KEY + " is not an object of strings");
    }
    Map<String, String> out = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = node.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (!e.getValue().isTextual()) {
        throw fail(path, METADATA_KEY + "." + e.getKey() + " is not a string");
      }
      out.put(e.getKey(), e.getValue().asText());
    }
    return Collections.unmodifiableMap(out);
  }

  private static TensorInfo parseTensor(Path path, String name, JsonNode node, long dataSize)
      throws SafetensorsException {
    String where = "tensor '" + name + "'";
    if (!node.isObject()) {
      throw fail(path, where + " is not an object with dtype, shape and data_offsets");
    }
    JsonNode dtypeNode = node.get("dtype");
    if (dtypeNode == null || !dtypeNode.isTextual()) {
      throw fail(path, where + " has no dtype string");
    }
    DType dtype = DType.parse(dtypeNode.asText())
        .orElseThrow(() -> fail(path, where + " has unknown dtype '" + dtypeNode.asText() + "'"));
    JsonNode shapeNode = node.get("shape");
    if (shapeNode == null || !shapeNode.isArray()) {
      throw fail(path, where + " has no shape list");
    }
    List<Long> shape = new ArrayList<>(shapeNode.size());
    long elements = 1;
    for (JsonNode d : shapeNode) {
      if (!d.isIntegralNumber() || !d.canConvertToLong()) {
        throw fail(path, where + " has a shape entry that is not an integer: " + d);
      }
      long dim = d.asLong();
      if (dim < 0) {
        throw fail(path, where + " has a negative dimension " + dim + " in shape " + shapeNode);
      }
      shape.add(dim);
      try {
        elements = Math.multiplyExact(elements, dim);
      } catch (ArithmeticException overflow) {
        throw fail(path, where + " has shape " + shapeNode + " whose size overflows");
      }
    }
    long expectedBytes;
    try {
      expectedBytes = Math.multiplyExact(elements, dtype.bytes());
    } catch (ArithmeticException overflow) {
      throw fail(path, where + " has shape " + shapeNode + " whose size overflows");
    }
    JsonNode offsets = node.get("data_offsets");
    if (offsets == null || !offsets.isArray() || offsets.size() != 2 || !offsets.get(0).isIntegralNumber()
        || !offsets.get(1).isIntegralNumber() || !offsets.get(0).canConvertToLong()
        || !offsets.get(1).canConvertToLong()) {
      throw fail(path, where + " needs data_offsets [begin, end] of two integers, not " + offsets);
    }
    long begin = offsets.get(0).asLong();
    long end = offsets.get(1).asLong();
    if (begin < 0 || end < begin || end > dataSize) {
      throw fail(path, where + " has data_offsets [" + begin + ", " + end + "] outside the data section of "
          + dataSize + " bytes");
    }
    if (end - begin != expectedBytes) {
      throw fail(path, where + " has " + (end - begin) + " bytes of data but shape " + shape + " of " + dtype
          + " needs " + expectedBytes);
    }
    for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!f.equals("dtype") && !f.equals("shape") && !f.equals("data_offsets")) {
        throw fail(path, where + " has an unknown field '" + f + "'");
      }
    }
    return new TensorInfo(name, dtype, shape, begin, end);
  }

  /** Tensors must tile the data section exactly: sorted by offset, each starts where the previous ended. */
  private static void checkLayout(Path path, Collection<TensorInfo> tensors, long dataSize)
      throws SafetensorsException {
    List<TensorInfo> sorted = new ArrayList<>(tensors);
    sorted.sort(Comparator.comparingLong(TensorInfo::begin).thenComparingLong(TensorInfo::end));
    long at = 0;
    TensorInfo previous = null;
    for (TensorInfo t : sorted) {
      if (t.begin() < at) {
        throw fail(path, "tensor '" + t.name() + "' [" + t.begin() + ", " + t.end() + ") overlaps tensor '"
            + previous.name() + "' [" + previous.begin() + ", " + previous.end() + ")");
      }
      if (t.begin() > at) {
        throw fail(path, "tensor '" + t.name() + "' starts at " + t.begin() + " leaving a hole from " + at
            + (previous == null ? "" : " after tensor '" + previous.name() + "'"));
      }
      at = t.end();
      previous = t;
    }
    if (at != dataSize) {
      throw fail(path, "the tensors cover " + at + " bytes of a " + dataSize + "-byte data section");
    }
  }

  public Path path() {
    return path;
  }

  /** The {@code __metadata__} strings; empty when the file has none. */
  public Map<String, String> metadata() {
    return metadata;
  }

  /** Every tensor, in header order. */
  public Map<String, TensorInfo> tensors() {
    return tensors;
  }

  public Optional<TensorInfo> tensor(String name) {
    return Optional.ofNullable(tensors.get(name));
  }

  /** The byte offset in the file where the data section starts. */
  public long dataStart() {
    return dataStart;
  }

  /**
   * Reads {@code dst.remaining()} bytes of {@code tensor}, starting {@code offset} bytes into it, into
   * {@code dst} from its position; on return the position has advanced by that much.
   *
   * @throws IllegalArgumentException if the range is not inside the tensor
   * @throws IOException if the file is shorter than its header promised (it changed), or cannot be read
   */
  public void read(TensorInfo tensor, long offset, ByteBuffer dst) throws IOException {
    if (tensors.get(tensor.name()) != tensor && !tensor.equals(tensors.get(tensor.name()))) {
      throw new IllegalArgumentException("tensor '" + tensor.name() + "' is not one of " + path);
    }
    long n = dst.remaining();
    if (offset < 0 || offset > tensor.byteSize() - n) {
      throw new IllegalArgumentException(n + " bytes at offset " + offset + " are not inside tensor '"
          + tensor.name() + "' of " + tensor.byteSize() + " bytes");
    }
    readFully(channel, dst, dataStart + tensor.begin() + offset, path);
  }

  /**
   * The whole tensor in a new little-endian direct buffer, position 0.
   *
   * @throws IllegalArgumentException if the tensor is larger than one buffer can hold (2 GiB); read it in
   *     parts with {@link #read(TensorInfo, long, ByteBuffer)}
   */
  public ByteBuffer readDirect(TensorInfo tensor) throws IOException {
    if (tensor.byteSize() > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("tensor '" + tensor.name() + "' has " + tensor.byteSize()
          + " bytes, more than one buffer holds; read it in parts");
    }
    ByteBuffer b = ByteBuffer.allocateDirect((int) tensor.byteSize()).order(ByteOrder.LITTLE_ENDIAN);
    read(tensor, 0, b);
    return b.flip();
  }

  private static void readFully(FileChannel channel, ByteBuffer dst, long position, Path path)
      throws IOException {
    long at = position;
    while (dst.hasRemaining()) {
      int n = channel.read(dst, at);
      if (n < 0) {
        throw new EOFException(path + " ends at " + at + ", before the " + dst.remaining()
            + " bytes its header promised");
      }
      at += n;
    }
  }

  private static SafetensorsException fail(Path path, String what) {
    return new SafetensorsException(path + ": " + what);
  }

  @Override
  public void close() throws IOException {
    channel.close();
  }
}
