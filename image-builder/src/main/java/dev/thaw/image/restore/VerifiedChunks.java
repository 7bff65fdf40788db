package dev.thaw.image.restore;

import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;

/**
 * Reading a chunk from the store into a buffer and checking it against its digest: the one place restores and the
 * host cache's staging do it (each chunk hashed once, here, not again by the store).
 */
public final class VerifiedChunks {

  private VerifiedChunks() {}

  /**
   * Reads {@code digest} into exactly {@code dst.remaining()} bytes of {@code dst} (position and limit unchanged)
   * and checks the bytes' digest.
   *
   * @throws CorruptChunkException when the stored bytes are too long, too short, or hash to something else
   * @throws ChunkNotFoundException when the store lacks the chunk
   */
  public static void read(ChunkStore store, Digest digest, ByteBuffer dst, String where) {
    int expected = dst.remaining();
    ByteBuffer view = dst.duplicate();
    int n;
    try {
      n = store.readChunkUnchecked(digest, view);
    } catch (IllegalArgumentException e) {
      throw new CorruptChunkException(digest, "it holds more than the " + expected + " bytes the image says ("
          + where + ")");
    }
    if (n != expected) {
      throw new CorruptChunkException(digest, "it holds " + n + " bytes, the image says " + expected + " ("
          + where + ")");
    }
    Digest actual = Digest.of(dst.duplicate());
    if (!actual.equals(digest)) {
      throw new CorruptChunkException(digest, "its bytes hash to " + actual + " (" + where + ")");
    }
  }
}
