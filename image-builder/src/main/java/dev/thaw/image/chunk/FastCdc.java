package dev.thaw.image.chunk;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * FastCDC content-defined chunking (Xia et al., "FastCDC: a Fast and Efficient Content-Defined Chunking
 * Approach for Data Deduplication", USENIX ATC'16): a gear rolling hash with normalized chunking.
 *
 * <p>A chunk ends after a byte at which the gear hash {@code fp = (fp << 1) + GEAR[b]} has its top
 * {@code k} bits all zero, where {@code k = log2(avg) + NC} while the chunk is shorter than the average and
 * {@code log2(avg) - NC} after it (the two masks of normalized chunking). The hash restarts at zero at every
 * chunk start and the first {@code min} bytes of a chunk are skipped unread; a chunk that reaches {@code max}
 * bytes is cut there. A bit at position {@code p} of the hash depends only on the last {@code p + 1} bytes,
 * so the top bits see a 64-byte window: boundaries depend on local content only, and an insertion moves
 * only the boundaries next to it — the property deduplication needs.
 *
 * <p>Streaming: {@link #update} takes the stream as any sequence of buffers (a >2 GiB allocation as several
 * buffers, direct or heap), keeps the hash and the open chunk's length between calls, and reports each chunk
 * as an absolute {@code (offset, length)} in the stream when its end is seen; {@link #finish} reports the
 * last, possibly short, chunk. Nothing is copied: bytes are read in place with absolute gets, and the
 * buffers' positions and limits are left alone. One instance cuts one stream at a time; not thread-safe.
 */
public final class FastCdc {

  /** Receives chunks in stream order. */
  @FunctionalInterface
  public interface Sink {
    void chunk(long offset, int length);
  }

  private static final long[] GEAR = GearTable.GEAR;

  private final FastCdcOptions options;
  private final int min;
  private final int avg;
  private final int max;
  private final long maskSmall;
  private final long maskLarge;

  private long fp;
  /** Bytes of the open chunk seen so far. */
  private int open;
  /** Stream offset of the open chunk's first byte. */
  private long chunkStart;

  public FastCdc(FastCdcOptions options) {
    this.options = new FastCdcOptions(options).validate();
    this.min = options.minSize();
    this.avg = options.avgSize();
    this.max = options.maxSize();
    int bits = Integer.numberOfTrailingZeros(avg);
    this.maskSmall = topBits(bits + options.normalization());
    this.maskLarge = topBits(bits - options.normalization());
  }

  public FastCdcOptions options() {
    return new FastCdcOptions(options);
  }

  private static long topBits(int k) {
    return k == 0 ? 0 : -1L << (64 - k);
  }

  /** Cuts one whole buffer's remaining bytes; offsets are relative to its position. */
  public static List<Chunk> cut(ByteBuffer data, FastCdcOptions options) {
    List<Chunk> out = new ArrayList<>();
    FastCdc c = new FastCdc(options);
    c.update(data, (o, l) -> out.add(new Chunk(o, l)));
    c.finish((o, l) -> out.add(new Chunk(o, l)));
    return out;
  }

  /** Bytes consumed so far: the stream offset the next buffer starts at. */
  public long streamOffset() {
    return chunkStart + open;
  }

  /**
   * Feeds {@code data}'s remaining bytes (position and limit unchanged) and reports every chunk that ends
   * inside them; a chunk may begin in an earlier buffer.
   */
  public void update(ByteBuffer data, Sink sink) {
    final int end = data.limit();
    final long[] gear = GEAR;
    final long mS = maskSmall;
    final long mL = maskLarge;
    long h = fp;
    // base: index in data where the open chunk starts; negative when it started in an earlier buffer.
    long base = (long) data.position() - open;
    int i = data.position();
    while (true) {
      long hashFrom = base + min;
      if (hashFrom >= end) {
        break;
      }
      if (i < hashFrom) {
        i = (int) hashFrom;
      }
      int normalEnd = (int) Math.min(end, base + avg);
      int maxEnd = (int) Math.min(end, base + max);
      int cut = -1;
      for (; i < normalEnd; i++) {
        h = (h << 1) + gear[data.get(i) & 0xff];
        if ((h & mS) == 0) {
          cut = i + 1;
          break;
        }
      }
      if (cut < 0) {
        for (; i < maxEnd; i++) {
          h = (h << 1) + gear[data.get(i) & 0xff];
          if ((h & mL) == 0) {
            cut = i + 1;
            break;
          }
        }
      }
      if (cut < 0) {
        if (i == base + max) {
          cut = i;
        } else {
          break; // the buffer ended inside the chunk
        }
      }
      int length = (int) (cut - base);
      sink.chunk(chunkStart, length);
      chunkStart += length;
      base = cut;
      i = cut;
      h = 0;
    }
    fp = h;
    open = (int) (end - base);
  }

  /** Reports the last chunk, if any bytes are open, and resets for a new stream. */
  public void finish(Sink sink) {
    if (open > 0) {
      sink.chunk(chunkStart, open);
    }
    reset();
  }

  /** Forgets the current stream. */
  public void reset() {
    fp = 0;
    open = 0;
    chunkStart = 0;
  }
}
