package dev.thaw.pool.worker;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.hbm.TieredRestoreSource;
import java.util.List;

/** Where the host cache holds an image's chunks, as a worker reads them: placements resolved, restore sources. */
final class HostPlacements {

  private HostPlacements() {}

  /** The chunks a placement names in this worker's view of the arena. */
  static PinnedChunks chunks(HostCacheView cache, byte[] placement) {
    if (cache == null) {
      throw new ImageRestoreException("the image is placed in the host cache, and this worker maps none (start "
          + "the pool with a host cache path)", null);
    }
    try {
      return cache.chunks(ChunkPlacement.fromBytes(placement));
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("the host cache placement does not fit this worker's arena: "
          + e.getMessage(), e);
    }
  }

  /** A restore source over the host cache alone: what the placement lacks comes from the store. */
  static RestoreSource hostTier(PinnedChunks chunks) {
    return m -> d -> chunks.find(d).map(c -> new RestoreSource.HostChunk(c.buffer(), c.offset())).orElse(null);
  }

  /**
   * Looks every chunk of a prepared image up in its placement, through both kinds of source a BECOME restores it
   * from (the host cache alone, and with the HBM tier), so that the BECOME's restore thread finds them with its code
   * compiled and its digests hashed. Nothing with no placement.
   */
  static void resolveAhead(PinnedChunks chunks, ImageManifest manifest) {
    if (chunks == null) {
      return;
    }
    for (RestoreSource source : List.of(hostTier(chunks), new TieredRestoreSource(chunks, null))) {
      try (RestoreSource.Lease lease = source.lease(manifest)) {
        for (ImageManifest.Allocation a : manifest.allocations()) {
          for (ImageManifest.Chunk c : a.chunks()) {
            lease.find(c.digest());
          }
        }
      }
    }
  }
}
