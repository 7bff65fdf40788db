package dev.thaw.image.store;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * Where images live: content-addressed chunks, and manifests under tags.
 *
 * <p>Chunks are immutable and named by their {@link Digest}; storing one that is present is a no-op, which is
 * the deduplication across images. A manifest (opaque bytes here; JSON of the image format) is committed
 * together with its tag in one atomic step, and only after every chunk it names is durable: a reader never
 * sees a tag whose chunks are missing, and a build killed midway leaves no visible image. Deleting a tag never
 * deletes a chunk; {@link #collectGarbage} deletes the chunks no remaining manifest names.
 *
 * <p>Thread-safe: several threads may read while one builds.
 */
public interface ChunkStore extends AutoCloseable {

  /** True if the chunk is stored. */
  boolean contains(Digest digest);

  /**
   * Stores a chunk under its digest (the caller computed it; the store may check it). A no-op if present.
   * Not yet durable: see {@link #sync()}.
   */
  void putChunk(Digest digest, ByteBuffer data);

  /** Makes every chunk stored so far durable. */
  void sync();

  /** The chunk's size in bytes, if stored. */
  Optional<Integer> chunkSize(Digest digest);

  /**
   * Reads a chunk into {@code dst} from its position (a direct or pinned buffer: no extra copy), advancing
   * the position by the chunk's size.
   *
   * @return the chunk's size
   * @throws ChunkNotFoundException if it is not stored
   * @throws IllegalArgumentException if it does not fit in {@code dst.remaining()}
   */
  int readChunk(Digest digest, ByteBuffer dst);

  /**
   * {@link #readChunk}, leaving out any check of the bytes against {@code digest} the store makes on reads: for a
   * caller that checks every chunk itself (restores and the host cache do, before a byte may reach the device), so
   * the hash is paid once, not twice.
   */
  default int readChunkUnchecked(Digest digest, ByteBuffer dst) {
    return readChunk(digest, dst);
  }

  /**
   * Atomically points {@code tag} at {@code manifest}, which names {@code chunks}.
   *
   * @throws ChunkNotFoundException if one of {@code chunks} is not stored (nothing is committed)
   */
  void commit(String tag, byte[] manifest, Set<Digest> chunks);

  /** The manifest a tag points at. */
  Optional<byte[]> manifest(String tag);

  /** Every tag, sorted. */
  List<String> tags();

  /** Removes a tag and its manifest; its chunks stay until {@link #collectGarbage}. True if it existed. */
  boolean delete(String tag);

  /** Deletes every chunk that no committed manifest names; returns what it freed. */
  GarbageCollection collectGarbage();

  /**
   * What a garbage collection freed: {@code chunks} that no manifest named and {@code bytes}, their sizes; {@code
   * diskBytes}, what the store's files shrank by, which also holds bytes no chunk accounts for (what a build killed
   * before its sync appended, never indexed) and the dead part of files rewritten to give it back.
   */
  record GarbageCollection(long chunks, long bytes, long diskBytes) {}

  @Override
  void close();
}
