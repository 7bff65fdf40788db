package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.Images;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import java.util.ArrayList;
import java.util.List;

/**
 * What the server knows of an image without restoring it: its manifest, the signature its function declares
 * (read from the host state alone), and its footprint on a device.
 *
 * @param tag the tag it was registered under
 * @param manifest its manifest
 * @param signature the function's declared tensors and language model
 * @param deviceBytes device memory an instance holds: every allocation rounded up to the 2 MiB granularity
 * @param ranges every allocation's {@code [start, end)} device addresses, where an instance maps them
 * @param concurrency how many requests an instance serves at once ({@link ThawFunction#concurrency}): the server sends
 *     it up to that many
 * @param group the group image {@code tag} names (a tensor-parallel model: one image per rank, each rank on a device of
 *     its own), or null for one image; {@code manifest} is then rank 0's, {@code deviceBytes} the most any rank holds
 *     on its device, {@code ranges} every rank's
 */
public record ImageInfo(String tag, ImageManifest manifest, FunctionSignature signature, long deviceBytes,
    List<long[]> ranges, int concurrency, GroupImage.Stored group) {

  static final long GRANULARITY = 2L << 20;

  public ImageInfo {
    if (concurrency < 1) {
      throw new IllegalArgumentException("an instance serves at least one request at a time: " + concurrency);
    }
  }

  /** An image whose instances serve one request at a time. */
  public ImageInfo(String tag, ImageManifest manifest, FunctionSignature signature, long deviceBytes,
      List<long[]> ranges) {
    this(tag, manifest, signature, deviceBytes, ranges, 1, null);
  }

  /** Devices an instance takes: its group's ranks, or 1. */
  public int ranks() {
    return group == null ? 1 : group.ranks().size();
  }

  /**
   * Reads the image {@code tag} from the store: an image, or, when no image has that tag, the group whose ranks are
   * tagged {@link GroupImage#rankTag}.
   *
   * @throws ImageNotFoundException if neither an image nor a group has that tag
   * @throws ImageRestoreException if its function class cannot be loaded or its host state does not read, or it is a
   *     rank of a group (registered by the group's tag) or a group whose function is not a {@link GroupFunction}
   */
  public static ImageInfo read(ChunkStore store, String tag) {
    if (store.manifest(tag).isEmpty() && store.manifest(GroupImage.rankTag(tag, 0)).isPresent()) {
      return readGroup(store, tag);
    }
    ImageManifest m = Images.manifest(store, tag);
    JsonNode cfg = m.function().config();
    if (cfg != null && cfg.path(GroupImage.GROUP_FIELD).isObject()) {
      throw new ImageRestoreException("image '" + tag + "' is rank " + cfg.path(GroupImage.RANK_FIELD).asInt()
          + " of group '" + cfg.path(GroupImage.GROUP_FIELD).path("tag").asText() + "', which serves only whole: "
          + "register the group's tag", null);
    }
    FunctionSignature signature;
    int concurrency;
    try {
      ThawFunction<?> function = FunctionLoader.load(m.function().className());
      signature = signature(function, m);
      concurrency = concurrency(function, m);
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
    }
    List<long[]> ranges = new ArrayList<>();
    long bytes = footprint(m, ranges);
    return new ImageInfo(tag, m, signature, bytes, List.copyOf(ranges), concurrency, null);
  }

  private static ImageInfo readGroup(ChunkStore store, String tag) {
    GroupImage.Stored g = GroupImage.read(store, tag);
    ImageManifest m0 = g.ranks().get(0);
    FunctionSignature signature;
    try {
      ThawFunction<?> function = FunctionLoader.load(m0.function().className());
      if (!(function instanceof GroupFunction<?>)) {
        throw new ImageRestoreException("group '" + tag + "': its function " + m0.function().className()
            + " is not a GroupFunction, so it cannot serve as a group", null);
      }
      signature = signature(function, m0);
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("group '" + tag + "': " + e.getMessage(), e);
    }
    long most = 0;
    List<long[]> ranges = new ArrayList<>();
    for (ImageManifest m : g.ranks()) {
      most = Math.max(most, footprint(m, ranges));
    }
    return new ImageInfo(tag, m0, signature, most, List.copyOf(ranges), 1, g);
  }

  /** Device memory an instance of {@code m} holds, every allocation rounded up; each one's range into {@code ranges}. */
  private static long footprint(ImageManifest m, List<long[]> ranges) {
    long bytes = 0;
    for (ImageManifest.Allocation a : m.allocations()) {
      long rounded = (a.size() + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
      bytes += rounded;
      ranges.add(new long[] {a.address(), a.address() + rounded});
    }
    return bytes;
  }

  private static <S> FunctionSignature signature(ThawFunction<S> f, ImageManifest m) {
    return f.signature(HostStates.read(m.hostState(), f.stateType()));
  }

  private static <S> int concurrency(ThawFunction<S> f, ImageManifest m) {
    int n = f.concurrency(HostStates.read(m.hostState(), f.stateType()));
    if (n < 1) {
      throw new IllegalArgumentException("its function serves " + n + " requests at a time; at least 1 is needed");
    }
    return n;
  }

  /** True when an instance of this image and one of {@code other} would map overlapping addresses. */
  boolean overlaps(ImageInfo other) {
    for (long[] a : ranges) {
      for (long[] b : other.ranges) {
        if (a[0] < b[1] && b[0] < a[1]) {
          return true;
        }
      }
    }
    return false;
  }
}
