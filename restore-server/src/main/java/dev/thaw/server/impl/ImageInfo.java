package dev.thaw.server.impl;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.Images;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionSignature;
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
 */
public record ImageInfo(String tag, ImageManifest manifest, FunctionSignature signature, long deviceBytes,
    List<long[]> ranges, int concurrency) {

  static final long GRANULARITY = 2L << 20;

  public ImageInfo {
    if (concurrency < 1) {
      throw new IllegalArgumentException("an instance serves at least one request at a time: " + concurrency);
    }
  }

  /** An image whose instances serve one request at a time. */
  public ImageInfo(String tag, ImageManifest manifest, FunctionSignature signature, long deviceBytes,
      List<long[]> ranges) {
    this(tag, manifest, signature, deviceBytes, ranges, 1);
  }

  /**
   * Reads the image {@code tag} from the store.
   *
   * @throws ImageNotFoundException if no image has that tag
   * @throws ImageRestoreException if its function class cannot be loaded or its host state does not read
   */
  public static ImageInfo read(ChunkStore store, String tag) {
    ImageManifest m = Images.manifest(store, tag);
    FunctionSignature signature;
    int concurrency;
    try {
      ThawFunction<?> function = FunctionLoader.load(m.function().className());
      signature = signature(function, m);
      concurrency = concurrency(function, m);
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
    }
    long bytes = 0;
    List<long[]> ranges = new ArrayList<>();
    for (ImageManifest.Allocation a : m.allocations()) {
      long rounded = (a.size() + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
      bytes += rounded;
      ranges.add(new long[] {a.address(), a.address() + rounded});
    }
    return new ImageInfo(tag, m, signature, bytes, List.copyOf(ranges), concurrency);
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
