package dev.thaw.pool.hbm;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.pool.cache.PinnedChunks;
import java.util.List;
import java.util.Set;

/**
 * The host cache and the HBM tier as one {@link RestoreSource} for on-demand restore in a worker: chunks come
 * from the registered arena, and allocations mapped from the HBM tier are resident.
 *
 * <p>Packed buffers have no page boundaries to cut at, so a read-only buffer may lie partly in an imported
 * (read-only) slab and partly in a fresh one. The lease reports such a buffer not resident, and the imported slabs
 * as {@linkplain Lease#residentRanges() resident ranges}: the restore then copies the buffer's fresh part from the
 * cache like any other unit, on its stream, in its order, gated like any other, and never writes the imported
 * part. Nothing is copied or waited for here, so leasing costs no more than the host cache alone. Those chunks must
 * be in the cache: the pool uses the HBM tier together with a staged image.
 */
public final class TieredRestoreSource implements RestoreSource {

  private final PinnedChunks chunks;
  private final ResidentSlabs resident;

  /** @param resident the slabs the session was rebuilt with, or null when nothing came from the HBM tier */
  public TieredRestoreSource(PinnedChunks chunks, ResidentSlabs resident) {
    this.chunks = chunks;
    this.resident = resident;
  }

  /**
   * A lease that finds chunks in the cache and reports what the slabs imported so far hold: ask again after the
   * session is rebuilt ({@code OnDemandRestorer} does).
   */
  @Override
  public Lease lease(ImageManifest manifest) {
    Set<String> whole = resident == null ? Set.of() : resident.residentBuffers();
    List<long[]> ranges = resident == null ? List.of() : resident.residentRanges();
    return new Lease() {
      @Override
      public HostChunk find(Digest digest) {
        return chunks.find(digest).map(c -> new HostChunk(c.buffer(), c.offset())).orElse(null);
      }

      @Override
      public boolean resident(ImageManifest.Allocation allocation) {
        return whole.contains(allocation.name());
      }

      @Override
      public List<long[]> residentRanges() {
        return ranges;
      }
    };
  }
}
