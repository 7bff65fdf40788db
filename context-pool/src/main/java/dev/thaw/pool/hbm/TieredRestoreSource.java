package dev.thaw.pool.hbm;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.pool.cache.CoalescedCopies;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The host cache and the HBM tier as one {@link RestoreSource} for on-demand restore in a worker: chunks come
 * from the registered arena, and allocations mapped from the HBM tier are resident.
 *
 * <p>Packed buffers have no page boundaries to cut at, so a read-only buffer may lie partly in an imported
 * (read-only) slab and partly in a fresh one. A restore copies whole allocations and could not write the imported
 * part, so {@link #lease} first copies the fresh part of each such buffer from the cache (a page or so at each
 * boundary, microseconds) and then reports the buffer resident too. Those chunks must be in the cache: the pool
 * uses the HBM tier together with a staged image.
 */
public final class TieredRestoreSource implements RestoreSource {

  private final PinnedChunks chunks;
  private final ResidentSlabs resident;
  private final GpuContext context;

  /** @param resident the slabs the session was rebuilt with, or null when nothing came from the HBM tier */
  public TieredRestoreSource(PinnedChunks chunks, ResidentSlabs resident, GpuContext context) {
    this.chunks = chunks;
    this.resident = resident;
    this.context = context;
  }

  @Override
  public Lease lease(ImageManifest manifest) {
    Set<String> whole = new HashSet<>();
    if (resident != null) {
      whole.addAll(resident.residentBuffers());
      List<long[]> ranges = resident.residentRanges();
      List<ImageManifest.Allocation> partial = RestoreOrder.allocations(manifest).stream()
          .filter(a -> !whole.contains(a.name()) && ranges.stream()
              .anyMatch(r -> r[0] < a.address() + a.size() && a.address() < r[1]))
          .toList();
      if (!partial.isEmpty()) {
        try (GpuStream stream = context.createStream()) {
          CoalescedCopies.queue(CoalescedCopies.plan(partial, chunks, ranges), stream);
          stream.synchronize();
        }
        partial.forEach(a -> whole.add(a.name()));
      }
    }
    return new Lease() {
      @Override
      public HostChunk find(Digest digest) {
        return chunks.find(digest).map(c -> new HostChunk(c.buffer(), c.offset())).orElse(null);
      }

      @Override
      public boolean resident(ImageManifest.Allocation allocation) {
        return whole.contains(allocation.name());
      }
    };
  }
}
