package dev.thaw.pool;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.ChunkPlacement;
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
 */
public record ImageSource(String kind, Path path, CacheLease lease) {

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
  public ObjectNode toJson() {
    ObjectNode n = JsonNodeFactory.instance.objectNode();
    n.put("kind", kind);
    n.put("path", path.toString());
    return n;
  }
}
