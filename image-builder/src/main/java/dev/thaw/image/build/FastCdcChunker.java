package dev.thaw.image.build;

import dev.thaw.image.chunk.Chunk;
import dev.thaw.image.chunk.FastCdc;
import dev.thaw.image.chunk.FastCdcOptions;
import java.nio.ByteBuffer;
import java.util.List;

/** The builder's chunker: FastCDC ({@link FastCdc}) with the given sizes. */
public final class FastCdcChunker implements Chunker {

  private final FastCdcOptions options;

  public FastCdcChunker(FastCdcOptions options) {
    this.options = options;
  }

  /** FastCDC with the measured defaults (docs/benchmarks/chunking.md). */
  public FastCdcChunker() {
    this(new FastCdcOptions());
  }

  @Override
  public int[] cut(ByteBuffer data) {
    List<Chunk> chunks = FastCdc.cut(data, options);
    int[] lengths = new int[chunks.size()];
    for (int i = 0; i < lengths.length; i++) {
      lengths[i] = chunks.get(i).length();
    }
    return lengths;
  }

  @Override
  public int maxChunkBytes() {
    return options.maxSize();
  }

  @Override
  public String describe() {
    return "fastcdc min " + (options.minSize() >> 10) + " KiB, avg " + (options.avgSize() >> 10) + " KiB, max "
        + (options.maxSize() >> 10) + " KiB";
  }
}
