package dev.thaw.pool.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * Pins how a restore from the cache is cut into copies: chunks contiguous on the device and in the arena merge;
 * a break on either side starts a new copy; resident device ranges are left out, splitting a copy around them.
 */
class CoalescedCopiesTest {

  private static final PinnedBuffer ARENA = new PinnedBuffer() {
    @Override
    public long address() {
      return 0x1000;
    }

    @Override
    public long size() {
      return 1 << 20;
    }

    @Override
    public ByteBuffer asByteBuffer() {
      throw new UnsupportedOperationException();
    }

    @Override
    public ByteBuffer slice(long offset, int length) {
      throw new UnsupportedOperationException();
    }

    @Override
    public void close() {}
  };

  private static Digest d(int i) {
    return Digest.of(new byte[] {(byte) i});
  }

  private static PinnedChunks at(Map<Digest, Long> offsets, Map<Digest, Integer> lengths) {
    return digest -> Optional.ofNullable(offsets.get(digest))
        .map(o -> new CachedChunk(digest, ARENA, o, lengths.get(digest)));
  }

  @Test
  void contiguousChunksMergeAndBreaksStartNewCopies() {
    // a: chunks 1,2 at device 1000.., arena 0..; b: chunk 3 right after a on the device, but elsewhere in the arena.
    ImageManifest.Allocation a = new ImageManifest.Allocation("a", 1000, 300, List.of(
        new ImageManifest.Chunk(d(1), 0, 100), new ImageManifest.Chunk(d(2), 100, 200)));
    ImageManifest.Allocation b = new ImageManifest.Allocation("b", 1300, 50, List.of(
        new ImageManifest.Chunk(d(3), 0, 50)));
    Map<Digest, Long> off = new HashMap<>(Map.of(d(1), 0L, d(2), 100L, d(3), 5000L));
    Map<Digest, Integer> len = Map.of(d(1), 100, d(2), 200, d(3), 50);
    List<CoalescedCopies.Copy> copies = CoalescedCopies.plan(List.of(a, b), at(off, len));
    assertEquals(List.of(new CoalescedCopies.Copy(1000, ARENA, 0, 300), new CoalescedCopies.Copy(1300, ARENA, 5000, 50)),
        copies);
    off.put(d(3), 300L);
    assertEquals(List.of(new CoalescedCopies.Copy(1000, ARENA, 0, 350)), CoalescedCopies.plan(List.of(a, b),
        at(off, len)), "contiguous on both sides: one copy");
    assertEquals(350, CoalescedCopies.bytes(CoalescedCopies.plan(List.of(a, b), at(off, len))));
  }

  @Test
  void residentRangesAreLeftOut() {
    ImageManifest.Allocation a = new ImageManifest.Allocation("a", 1000, 1000, List.of(
        new ImageManifest.Chunk(d(1), 0, 1000)));
    PinnedChunks chunks = at(Map.of(d(1), 0L), Map.of(d(1), 1000));
    List<CoalescedCopies.Copy> copies = CoalescedCopies.plan(List.of(a), chunks,
        List.of(new long[] {1200, 1300}, new long[] {1900, 4000}, new long[] {0, 1000}));
    assertEquals(List.of(new CoalescedCopies.Copy(1000, ARENA, 0, 200), new CoalescedCopies.Copy(1300, ARENA, 300, 600)),
        copies);
    assertEquals(List.of(), CoalescedCopies.plan(List.of(a), chunks, List.of(new long[] {0, 5000})));
  }

  @Test
  void aChunkTheCacheLacksIsNamed() {
    ImageManifest.Allocation a = new ImageManifest.Allocation("a", 1000, 10, List.of(
        new ImageManifest.Chunk(d(9), 0, 10)));
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> CoalescedCopies.plan(List.of(a), PinnedChunks.none()));
    assertEquals("chunk " + d(9) + " of allocation 'a' is not in the host cache", e.getMessage());
  }
}
