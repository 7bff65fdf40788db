package dev.thaw.pool;

import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.hbm.ExportedSlab;
import java.nio.file.Path;
import java.util.List;

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
 * @param helpers other devices whose links the restore may use for the host cache's bytes (multi-link restore), in
 *     order: the worker uses those it holds a usable link to ({@link ContextPoolOptions#helperLinks()}); empty for
 *     none. Name only devices that run nothing now: their links' host → device direction is lent whole
 * @param helperShare the part of each helper's link the restore may use, over (0, 1]
 * @param peer another device's HBM-tier slabs of the image (descriptors of this process), pulled over the peer link
 *     into the worker's own fresh slabs; null for none. Only with the host cache
 * @param peerDevice the device whose memory {@code peer} is (the worker relays it through its link from there when it
 *     holds one, else maps it for its own device); -1 without {@code peer}
 */
public record ImageSource(String kind, Path path, CacheLease lease, List<ExportedSlab> resident,
    List<Integer> helpers, double helperShare, List<ExportedSlab> peer, int peerDevice) {

  public ImageSource {
    resident = resident == null ? null : List.copyOf(resident);
    helpers = List.copyOf(helpers);
    peer = peer == null ? null : List.copyOf(peer);
    if (!(helperShare > 0 && helperShare <= 1)) {
      throw new IllegalArgumentException("a helper's share of its link is over (0, 1], not " + helperShare);
    }
    if (helpers.stream().distinct().count() != helpers.size() || helpers.stream().anyMatch(d -> d < 0)) {
      throw new IllegalArgumentException("helpers are distinct device ordinals: " + helpers);
    }
    if (peer != null && peerDevice < 0) {
      throw new IllegalArgumentException("another device's slabs name their device, not " + peerDevice);
    }
  }

  public ImageSource(String kind, Path path, CacheLease lease, List<ExportedSlab> resident) {
    this(kind, path, lease, resident, List.of(), OnDemandOptions.DEFAULT_HELPER_SHARE, null, -1);
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
    requireCache("the HBM tier");
    return new ImageSource(kind, path, lease, slabs, helpers, helperShare, peer, peerDevice);
  }

  /**
   * The same source, restoring the host cache's bytes through {@code devices}' links as well as the worker's own, each
   * lent at {@code share} of its link.
   *
   * @throws IllegalStateException for a store source (what the store supplies goes through the worker's staging)
   */
  public ImageSource withHelpers(List<Integer> devices, double share) {
    if (!devices.isEmpty()) {
      requireCache("helper links");
    }
    return new ImageSource(kind, path, lease, resident, devices, share, peer, peerDevice);
  }

  /**
   * The same source with device {@code device}'s HBM-tier slabs of the image ({@code HbmTier} of that device): the
   * worker pulls the allocations lying wholly in them over the peer link instead of copying them from the host.
   *
   * @throws IllegalStateException for a store source
   */
  public ImageSource withPeer(int device, List<ExportedSlab> slabs) {
    requireCache("another device's HBM tier");
    return new ImageSource(kind, path, lease, resident, helpers, helperShare, slabs, device);
  }

  private void requireCache(String what) {
    if (lease == null) {
      throw new IllegalStateException(what + " is used together with the host cache, not the store alone");
    }
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

}
