package dev.thaw.pool.cache;

import dev.thaw.image.store.Digest;
import java.util.Optional;

/**
 * A restore's view of the host image cache, in a worker: for a chunk digest, the pinned host memory holding
 * its verified bytes, or nothing when the cache does not hold it (the restore then reads the store).
 *
 * <p>Cheap and thread-safe: a lookup is a hash-map probe, never I/O, never a copy. The answer stays valid
 * while the parent's {@link CacheLease} for the image is held, which the pool keeps for the length of the
 * restore; the cache never evicts a chunk a lease pins.
 */
public interface PinnedChunks {

  /** The chunk's bytes in registered host memory, or empty. */
  Optional<CachedChunk> find(Digest digest);

  /** A view that holds nothing: every restore reads the store. */
  static PinnedChunks none() {
    return digest -> Optional.empty();
  }
}
