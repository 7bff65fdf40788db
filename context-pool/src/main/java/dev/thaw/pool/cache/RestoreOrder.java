package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The order in which a restore wants an image's bytes, and so the order the cache lays them out in: module
 * cubins first (the session needs them before any launch), then allocations in the profile's first-access
 * order, then the allocations no profiled launch touched in allocation order; within an allocation, by offset.
 */
public final class RestoreOrder {

  private RestoreOrder() {}

  /** The allocations in restore order. */
  public static List<ImageManifest.Allocation> allocations(ImageManifest manifest) {
    Map<String, ImageManifest.Allocation> byName = new LinkedHashMap<>();
    manifest.allocations().forEach(a -> byName.put(a.name(), a));
    List<ImageManifest.Allocation> out = new ArrayList<>(byName.size());
    for (String name : manifest.profile().firstAccessOrder()) {
      ImageManifest.Allocation a = byName.remove(name);
      if (a != null) {
        out.add(a);
      }
    }
    out.addAll(byName.values());
    return out;
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

  /** Each distinct chunk's length. */
  public static Map<Digest, Integer> lengths(ImageManifest manifest) {
    Map<Digest, Integer> out = new LinkedHashMap<>();
    manifest.modules().forEach(m -> out.put(m.cubin().digest(), m.cubin().length()));
    manifest.allocations().forEach(a -> a.chunks().forEach(c -> out.put(c.digest(), c.length())));
    return out;
  }
}
