package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;

/**
 * The host image cache as an on-demand restore's {@link RestoreSource}: each chunk the worker's
 * {@link PinnedChunks} view holds is copied straight from the registered arena (verified when it entered the cache,
 * trusted after); the rest come from the store. The bytes stay in place because the pool holds the image's
 * {@link CacheLease} for the length of the restore, so a restore's lease here holds nothing of its own.
 */
public final class HostCacheSource implements RestoreSource {

  private final PinnedChunks chunks;

  private HostCacheSource(PinnedChunks chunks) {
    this.chunks = chunks;
  }

  /** A source over one image's placement in the arena ({@link HostCacheView#chunks}). */
  public static HostCacheSource of(PinnedChunks chunks) {
    return new HostCacheSource(chunks);
  }

  @Override
  public Lease lease(ImageManifest manifest) {
    return (Digest digest) -> chunks.find(digest).map(c -> new HostChunk(c.buffer(), c.offset())).orElse(null);
  }
}
