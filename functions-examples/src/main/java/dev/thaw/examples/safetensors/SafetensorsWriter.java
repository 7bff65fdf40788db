package dev.thaw.examples.safetensors;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Writes safetensors files. Tensors are added with their dtype and shape and a {@link TensorData} that writes
 * their bytes when the file is written, one tensor at a time, so a model larger than the heap can be saved
 * with bounded memory. The file is written to a temporary sibling and moved into place, so a failed write
 * leaves no partial file under the name.
 */
public final class SafetensorsWriter {

  /** Writes a tensor's bytes, in order, into {@code sink}: exactly elements × dtype width bytes. */
  @FunctionalInterface
  public interface TensorData {
    void writeTo(Sink sink) throws IOException;
  }

  /** Where a {@link TensorData} writes; each call appends {@code src.remaining()} bytes. */
  @FunctionalInterface
  public interface Sink {
    void write(ByteBuffer src) throws IOException;
  }

  /** Reads bytes {@code [at, at + dst.remaining())} of a tensor into {@code dst}. */
  @FunctionalInterface
  public interface RangeReader {
    void read(long at, ByteBuffer dst) throws IOException;
  }

  /** A tensor of {@code bytes} bytes streamed from {@code source} in 8 MiB chunks through one direct buffer. */
  public static TensorData streamed(long bytes, RangeReader source) {
    return sink -> {
      int chunk = 8 << 20;
      ByteBuffer buf = ByteBuffer.allocateDirect((int) Math.min(chunk, bytes));
      for (long at = 0; at < bytes; at += chunk) {
        buf.clear().limit((int) Math.min(chunk, bytes - at));
        source.read(at, buf);
        sink.write(buf.flip());
      }
    };
  }

  private record Entry(String name, DType dtype, long[] shape, long bytes, TensorData data) {}

  private static final ObjectMapper JSON = new ObjectMapper();

  private final Map<String, String> metadata = new LinkedHashMap<>();
  private final List<Entry> entries = new ArrayList<>();
  private final Set<String> names = new HashSet<>();

  public SafetensorsWriter metadata(String key, String value) {
    metadata.put(key, value);
    return this;
  }

  /** Adds a tensor whose bytes are {@code data}'s remaining bytes (read when the file is written). */
  public SafetensorsWriter add(String name, DType dtype, long[] shape, ByteBuffer data) {
    ByteBuffer copy = data.duplicate();
    return add(name, dtype, shape, sink -> sink.write(copy.duplicate()));
  }

  /** Adds a tensor whose bytes {@code data} writes when the file is written. */
  public SafetensorsWriter add(String name, DType dtype, long[] shape, TensorData data) {
    if (name == null || name.isEmpty() || name.equals(SafetensorsFile.METADATA_KEY) || !names.add(name)) {
      throw new IllegalArgumentException("'" + name + "' is empty, reserved or already added");
    }
    long elements = 1;
    for (long d : shape) {
      if (d < 0) {
        throw new IllegalArgumentException("tensor '" + name + "' has a negative dimension " + d);
      }
      elements = Math.multiplyExact(elements, d);
    }
    entries.add(new Entry(name, dtype, shape.clone(), Math.multiplyExact(elements, dtype.bytes()), data));
    return this;
  }

  /**
   * Writes the file: header (padded with spaces to a multiple of 8 bytes, as the reference writer does), then
   * each tensor's bytes in the order added.
   *
   * @throws IllegalStateException if a tensor's data writes a different number of bytes than its shape says
   */
  public void write(Path path) throws IOException {
    ObjectNode header = JSON.createObjectNode();
    if (!metadata.isEmpty()) {
      ObjectNode m = header.putObject(SafetensorsFile.METADATA_KEY);
      metadata.forEach(m::put);
    }
    long offset = 0;
    for (Entry e : entries) {
      ObjectNode t = header.putObject(e.name);
      t.put("dtype", e.dtype.name());
      ArrayNode shape = t.putArray("shape");
      for (long d : e.shape) {
        shape.add(d);
      }
      t.putArray("data_offsets").add(offset).add(offset + e.bytes);
      offset += e.bytes;
    }
    byte[] json = JSON.writeValueAsBytes(header);
    int padded = (json.length + 7) / 8 * 8;
    ByteBuffer head = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
    head.putLong(padded).put(json);
    while (head.hasRemaining()) {
      head.put((byte) ' ');
    }
    head.flip();
    Path tmp = path.resolveSibling(path.getFileName() + ".tmp");
    try (FileChannel out = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
        StandardOpenOption.TRUNCATE_EXISTING)) {
      writeFully(out, head);
      for (Entry e : entries) {
        long[] written = {0};
        e.data.writeTo(src -> {
          written[0] += src.remaining();
          if (written[0] > e.bytes) {
            throw new IllegalStateException("tensor '" + e.name + "' wrote more than its " + e.bytes + " bytes");
          }
          writeFully(out, src);
        });
        if (written[0] != e.bytes) {
          throw new IllegalStateException("tensor '" + e.name + "' wrote " + written[0] + " of its " + e.bytes
              + " bytes");
        }
      }
      out.force(true);
    } catch (IOException | RuntimeException e) {
      Files.deleteIfExists(tmp);
      throw e;
    }
    Files.move(tmp, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static void writeFully(FileChannel out, ByteBuffer src) throws IOException {
    while (src.hasRemaining()) {
      out.write(src);
    }
  }
}
