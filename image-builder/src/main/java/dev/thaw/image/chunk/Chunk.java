package dev.thaw.image.chunk;

/** A chunk's place in the stream a {@link FastCdc} cut: {@code length} bytes from byte {@code offset}. */
public record Chunk(long offset, int length) {

  public Chunk {
    if (offset < 0 || length <= 0) {
      throw new IllegalArgumentException("a chunk has offset >= 0 and length > 0, got " + offset + "+" + length);
    }
  }

  /** The offset one past the chunk's last byte. */
  public long end() {
    return offset + length;
  }
}
