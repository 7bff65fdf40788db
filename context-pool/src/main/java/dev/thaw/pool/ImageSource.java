package dev.thaw.pool;

import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.protocol.WorkerMessages;
import java.util.List;
import java.nio.file.Path;

/**
 * Where a worker reads an image's bytes from.
 *
 * <ul>
 *   <li>{@link #store}: the chunk store on local disk, opened read-only by the worker; every chunk is verified
 *       on the way in.
 *   <li>{@link #hostCache}: the pinned host image cache, which every worker mapped and registered at start
 *       ({@link ContextPoolOptions#setHostCachePath}); chunks were verified when they entered it. The worker
 *       falls back to the store when the placement lacks any chunk of the image.
 * </ul>
 *
 * @param kind {@code store} or {@code cache}
 * @param path the store's folder (for {@code cache}: the fallback)
 * @param lease the host cache lease that pins the image's chunks, for {@code cache}; else null. The worker handle
 *     takes it over: it closes it once the restore is complete ({@link Worker#resident()}) or the worker ends
 * @param resident the HBM tier's slabs of the image (descriptors of this process, which the worker takes with
 *     {@code pidfd_getfd}), maybe none; null when the caller keeps no HBM tier. Non-null also asks the worker to
 *     create the image's read-only slabs exportable, so that they can join the tier when it is evicted
 *     ({@link Worker#exportReadOnly()}). Only with the host cache, which supplies whatever the slabs lack
 */
public record ImageSource(String kind, Path path, CacheLease lease, List<ExportedSlab> resident) {

  public ImageSource {
    resident = resident == null ? null : List.copyOf(resident);
  }

  public ImageSource(String kind, Path path, CacheLease lease) {
    this(kind, path, lease, null);
  }

  /**
   * The same source with the image's read-only slabs left on the device by an earlier worker ({@code HbmTier}):
   * the worker maps them read-only instead of copying their bytes.
   *
   * @throws IllegalStateException for a store source (the tier is used with a staged image)
   */
  public ImageSource withResident(List<ExportedSlab> slabs) {
    if (lease == null) {
      throw new IllegalStateException("the HBM tier is used together with the host cache, not the store alone");
    }
    return new ImageSource(kind, path, lease, slabs);
  }

  public static ImageSource store(Path path) {
    return new ImageSource("store", path.toAbsolutePath().normalize(), null);
  }

  /**
   * The image as {@code lease} placed it in the host cache (chunks the placement lacks come from the store at
   * {@code store}). The lease passes to the worker, which closes it when its restore no longer reads the arena.
   */
  public static ImageSource hostCache(CacheLease lease, Path store) {
    return new ImageSource("cache", store.toAbsolutePath().normalize(), lease);
  }

  /** Where the image's chunks lie in the arena, or null. */
  public ChunkPlacement placement() {
    return lease == null ? null : lease.placement();
  }

  /** The form a BECOME frame's head carries (the placement travels in the body). */
  public WorkerMessages.Source toMessage() {
    return new WorkerMessages.Source(kind, path.toString(), resident == null ? null
        : new WorkerMessages.Hbm(ProcessHandle.current().pid(), ExportedSlab.encodeAll(resident)));
  }
}
