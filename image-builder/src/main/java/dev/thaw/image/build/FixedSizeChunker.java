package dev.thaw.image.build;

import java.nio.ByteBuffer;

/**
 * Cuts every segment into chunks of one size (the last one shorter). It deduplicates only identical aligned
 * ranges — zeroed buffers, repeated weights — and is the stand-in until a content-defined chunker is plugged in.
 */
public final class FixedSizeChunker implements Chunker {

  public static final int DEFAULT_CHUNK_BYTES = 4 << 20;

  private final int chunkBytes;

  public FixedSizeChunker() {
    this(DEFAULT_CHUNK_BYTES);
  }

  public FixedSizeChunker(int chunkBytes) {
    if (chunkBytes <= 0) {
      throw new IllegalArgumentException("chunk size must be positive: " + chunkBytes);
    }
    this.chunkBytes = chunkBytes;
  }

  @Override
  public int[] cut(ByteBuffer data) {
    int n = data.remaining();
    int count = (n + chunkBytes - 1) / chunkBytes;
    int[] lengths = new int[count];
    for (int i = 0; i < count; i++) {
      lengths[i] = Math.min(chunkBytes, n - i * chunkBytes);
    }
    return lengths;
  }

  @Override
  public int maxChunkBytes() {
    return chunkBytes;
  }

  @Override
  public String describe() {
    return "fixed " + chunkBytes + " bytes";
  }
}
