package dev.thaw.pool.cache;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The host-to-device copies that restore an image from the host cache, coalesced: consecutive chunks that are
 * contiguous both in the arena and on the device become one copy. With the cache's layout (an image's chunks back
 * to back in {@link RestoreOrder}) and a packed image (allocations back to back on the device), a whole image is
 * a handful of copies, each far above the 4 MiB at which copies reach 53 GB/s.
 */
public final class CoalescedCopies {

  /** One copy: {@code bytes} from {@code source} at {@code sourceOffset} to device address {@code device}. */
  public record Copy(long device, PinnedBuffer source, long sourceOffset, long bytes) {}

  private CoalescedCopies() {}

  /**
   * The copies for every chunk of {@code allocations} that {@code chunks} holds, in the given order.
   *
   * @throws IllegalStateException naming a chunk the cache does not hold
   */
  public static List<Copy> plan(List<ImageManifest.Allocation> allocations, PinnedChunks chunks) {
    return plan(allocations, chunks, List.of());
  }

  /**
   * Like {@link #plan(List, PinnedChunks)}, leaving out the device ranges {@code [start, end)} in {@code resident}
   * (bytes already there, e.g. mapped read-only from the HBM tier).
   */
  public static List<Copy> plan(List<ImageManifest.Allocation> allocations, PinnedChunks chunks, List<long[]> resident) {
    List<Copy> out = new ArrayList<>();
    for (Copy c : coalesce(allocations, chunks)) {
      clip(c, resident, out);
    }
    return out;
  }

  /** Adds the parts of {@code c} outside every range of {@code resident} to {@code out}. */
  private static void clip(Copy c, List<long[]> resident, List<Copy> out) {
    long start = c.device();
    long end = c.device() + c.bytes();
    List<long[]> overlapping = resident.stream().filter(r -> r[0] < end && r[1] > start)
        .sorted(Comparator.comparingLong(r -> r[0])).toList();
    long at = start;
    for (long[] r : overlapping) {
      if (r[0] > at) {
        out.add(new Copy(at, c.source(), c.sourceOffset() + (at - c.device()), r[0] - at));
      }
      at = Math.max(at, r[1]);
    }
    if (at < end) {
      out.add(new Copy(at, c.source(), c.sourceOffset() + (at - c.device()), end - at));
    }
  }

  private static List<Copy> coalesce(List<ImageManifest.Allocation> allocations, PinnedChunks chunks) {
    List<Copy> out = new ArrayList<>();
    long dev = -1;
    long host = -1;
    PinnedBuffer buf = null;
    long start = 0;
    long startHost = 0;
    long bytes = 0;
    for (ImageManifest.Allocation a : allocations) {
      for (ImageManifest.Chunk c : a.chunks()) {
        CachedChunk cc = chunks.find(c.digest()).orElseThrow(() -> new IllegalStateException("chunk " + c.digest()
            + " of allocation '" + a.name() + "' is not in the host cache"));
        long d = a.address() + c.offset();
        if (buf == cc.buffer() && d == dev && cc.offset() == host) {
          bytes += c.length();
        } else {
          if (bytes > 0) {
            out.add(new Copy(start, buf, startHost, bytes));
          }
          buf = cc.buffer();
          start = d;
          startHost = cc.offset();
          bytes = c.length();
        }
        dev = d + c.length();
        host = cc.offset() + c.length();
      }
    }
    if (bytes > 0) {
      out.add(new Copy(start, buf, startHost, bytes));
    }
    return out;
  }

  /** Queues every copy on {@code stream}. */
  public static void queue(List<Copy> copies, GpuStream stream) {
    for (Copy c : copies) {
      stream.copyHostToDeviceAsync(c.device(), c.source(), c.sourceOffset(), c.bytes());
    }
  }

  /** Bytes the copies move. */
  public static long bytes(List<Copy> copies) {
    return copies.stream().mapToLong(Copy::bytes).sum();
  }
}
