package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.store.Digest;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The order in which a restore wants an image's bytes, and so the order the cache lays them out in: module
 * cubins first (the session needs them before any launch), then the allocations in {@link RestorePlan#runOrder()}
 * (the profile's first-access order, each allocation followed by those that continue it on the device, so that a
 * restore's runs lie back to back in the arena too); within an allocation, by offset.
 */
public final class RestoreOrder {

  private RestoreOrder() {}

  /** The allocations in restore order. */
  public static List<ImageManifest.Allocation> allocations(ImageManifest manifest) {
    return RestorePlan.of(manifest).runOrder();
  }

  /** Every distinct chunk of the image (cubins and allocations), each once, in restore order. */
  public static List<Digest> chunks(ImageManifest manifest) {
    Set<Digest> out = new LinkedHashSet<>();
    manifest.modules().forEach(m -> out.add(m.cubin().digest()));
    for (ImageManifest.Allocation a : allocations(manifest)) {
      a.chunks().forEach(c -> out.add(c.digest()));
    }
    return new ArrayList<>(out);
  }

  /**
   * Every use of a chunk, in restore order: each distinct cubin once (no device address), then every chunk of every
   * allocation, repeats included, with the device address it is restored to.
   */
  public static List<ChunkPlacement.Entry> uses(ImageManifest manifest) {
    List<ChunkPlacement.Entry> out = new ArrayList<>();
    Set<Digest> cubins = new LinkedHashSet<>();
    for (ImageManifest.Module m : manifest.modules()) {
      if (cubins.add(m.cubin().digest())) {
        out.add(new ChunkPlacement.Entry(m.cubin().digest(), 0, m.cubin().length()));
      }
    }
    for (ImageManifest.Allocation a : allocations(manifest)) {
      for (ImageManifest.Chunk c : a.chunks()) {
        out.add(new ChunkPlacement.Entry(c.digest(), 0, c.length(), a.address() + c.offset()));
      }
    }
    return out;
  }

  /** Each distinct chunk's length. */
  public static Map<Digest, Integer> lengths(ImageManifest manifest) {
    Map<Digest, Integer> out = new LinkedHashMap<>();
    manifest.modules().forEach(m -> out.put(m.cubin().digest(), m.cubin().length()));
    manifest.allocations().forEach(a -> a.chunks().forEach(c -> out.put(c.digest(), c.length())));
    return out;
  }
}
