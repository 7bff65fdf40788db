package dev.thaw.image.chunk;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Pins the chunker's contract: deterministic, bounded, near the average, and shift-resistant. */
class FastCdcTest {

  /** Small sizes keep the tests fast; the algorithm does not depend on scale. */
  private static final FastCdcOptions SMALL = FastCdcOptions.ofAverage(8 << 10);

  private static byte[] random(long seed, int n) {
    byte[] b = new byte[n];
    new Random(seed).nextBytes(b);
    return b;
  }

  private static void checkTiling(List<Chunk> chunks, long total, FastCdcOptions o) {
    long expect = 0;
    for (int i = 0; i < chunks.size(); i++) {
      Chunk c = chunks.get(i);
      assertEquals(expect, c.offset(), "chunks tile the stream");
      assertTrue(c.length() <= o.maxSize(), "chunk " + i + " above max: " + c.length());
      if (i < chunks.size() - 1) {
        assertTrue(c.length() >= o.minSize(), "chunk " + i + " below min: " + c.length());
      }
      expect = c.end();
    }
    assertEquals(total, expect);
  }

  @Test
  void boundariesAreDeterministicAndIndependentOfBufferSplitsAndKind() {
    byte[] data = random(1, 3 << 20);
    List<Chunk> whole = FastCdc.cut(ByteBuffer.wrap(data), SMALL);
    checkTiling(whole, data.length, SMALL);
    assertEquals(whole, FastCdc.cut(ByteBuffer.wrap(data.clone()), SMALL));

    Random r = new Random(7);
    for (int round = 0; round < 5; round++) {
      FastCdc c = new FastCdc(SMALL);
      List<Chunk> streamed = new ArrayList<>();
      int pos = 0;
      while (pos < data.length) {
        int n = Math.min(data.length - pos, 1 + r.nextInt(round == 0 ? 7 : 100_000));
        ByteBuffer piece;
        if (r.nextBoolean()) {
          piece = ByteBuffer.allocateDirect(n + 16).position(8);
          piece.put(data, pos, n).flip().position(8);
        } else {
          piece = ByteBuffer.wrap(data, pos, n);
        }
        int p = piece.position();
        int l = piece.limit();
        c.update(piece, (o, len) -> streamed.add(new Chunk(o, len)));
        assertEquals(p, piece.position(), "position untouched");
        assertEquals(l, piece.limit(), "limit untouched");
        pos += n;
        if (round == 0 && pos > 200_000) {
          n = data.length - pos; // the byte-at-a-time round covers a prefix, then the rest in one piece
          c.update(ByteBuffer.wrap(data, pos, n), (o, len) -> streamed.add(new Chunk(o, len)));
          pos += n;
        }
      }
      c.finish((o, len) -> streamed.add(new Chunk(o, len)));
      assertEquals(whole, streamed, "round " + round);
    }
  }

  @Test
  void offsetsAreRelativeToTheBufferPosition() {
    byte[] data = random(2, 200_000);
    ByteBuffer b = ByteBuffer.allocate(data.length + 100);
    b.position(100);
    b.put(data).position(100);
    assertEquals(FastCdc.cut(ByteBuffer.wrap(data), SMALL), FastCdc.cut(b, SMALL));
  }

  @Test
  void averageIsNearTheTargetOnRandomData() {
    for (FastCdcOptions o : List.of(SMALL, FastCdcOptions.ofAverage(64 << 10))) {
      byte[] data = random(3, 32 << 20);
      List<Chunk> chunks = FastCdc.cut(ByteBuffer.wrap(data), o);
      checkTiling(chunks, data.length, o);
      double mean = (double) data.length / chunks.size();
      assertTrue(mean > 0.8 * o.avgSize() && mean < 1.25 * o.avgSize(),
          "mean " + mean + " for avg " + o.avgSize());
    }
  }

  @Test
  void constantDataIsCutAtMax() {
    ByteBuffer zeros = ByteBuffer.allocateDirect(1 << 20);
    List<Chunk> chunks = FastCdc.cut(zeros, SMALL);
    checkTiling(chunks, 1 << 20, SMALL);
    assertTrue(chunks.size() >= (1 << 20) / SMALL.maxSize());
  }

  @Test
  void shortStreamsAreOneChunkAndEmptyIsNone() {
    assertEquals(List.of(new Chunk(0, 100)), FastCdc.cut(ByteBuffer.allocate(100), SMALL));
    assertEquals(List.of(), FastCdc.cut(ByteBuffer.allocate(0), SMALL));
  }

  @Test
  void anInsertionNearTheStartKeepsMostLaterChunks() {
    byte[] data = random(4, 8 << 20);
    for (int inserted : new int[] {1, 7, 100, 4096}) {
      byte[] shifted = new byte[data.length + inserted];
      int at = 5000;
      System.arraycopy(data, 0, shifted, 0, at);
      System.arraycopy(random(5, inserted), 0, shifted, at, inserted);
      System.arraycopy(data, at, shifted, at + inserted, data.length - at);
      Set<Digest> before = digests(data);
      Set<Digest> after = digests(shifted);
      Set<Digest> shared = new HashSet<>(before);
      shared.retainAll(after);
      // Only the chunks the insertion lands in and the next one or two (until the cut points resynchronize)
      // can change: of ~1,000 chunks all but a handful survive.
      assertTrue(before.size() - shared.size() <= 3 + inserted / SMALL.minSize(),
          inserted + " bytes inserted: " + (before.size() - shared.size()) + " of " + before.size() + " lost");
    }
  }

  private static Set<Digest> digests(byte[] data) {
    Set<Digest> out = new HashSet<>();
    for (Chunk c : FastCdc.cut(ByteBuffer.wrap(data), SMALL)) {
      out.add(Digest.of(ByteBuffer.wrap(data, (int) c.offset(), c.length())));
    }
    return out;
  }
}
