package dev.thaw.pool.worker;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.List;

/**
 * Zeroes the device memory of a session that a recycled worker is about to free, except the slabs the HBM tier holds.
 *
 * <p>Why: freed physical memory goes back to the driver, and within one process CUDA hands it out again without
 * clearing it (the driver clears pages between processes, which is what made a worker per image safe). A worker
 * that becomes another image maps that image's slabs in the same context, so without this the next image's function
 * could read the previous one's weights, activations and request data in its uninitialized buffers. The tier's slabs
 * are left alone: they are read-only weights the tier keeps on the device for a later start of the same image, which
 * a write would corrupt, and they are freed by the tier's process, not this one.
 */
final class DeviceScrub {

  /** What a scrub did, in device bytes. */
  record Result(long scrubbedBytes, long keptBytes) {}

  private DeviceScrub() {}

  /**
   * Zeroes every slab of {@code session} outside {@code tierRanges} ({@code [start, end)} device ranges the HBM tier
   * holds), making a read-only slab writable first (the session is freed right after), and waits until the zeros
   * have landed. Call it once nothing of the function runs.
   */
  static Result scrub(FunctionSession session, List<long[]> tierRanges) {
    GpuContext context = session.context();
    long scrubbed = 0;
    long kept = 0;
    for (FunctionSession.MappedSlab m : session.slabs()) {
      long start = m.slab().address();
      long size = m.slab().size();
      if (heldByTier(start, start + size, tierRanges)) {
        kept += size;
        continue;
      }
      if (m.mapping().access() != MemoryAccess.READ_WRITE) {
        m.mapping().setAccess(MemoryAccess.READ_WRITE);
      }
      context.memsetD8(start, (byte) 0, size);
      scrubbed += size;
    }
    context.synchronize();
    return new Result(scrubbed, kept);
  }

  private static boolean heldByTier(long start, long end, List<long[]> tierRanges) {
    for (long[] r : tierRanges) {
      if (start >= r[0] && end <= r[1]) {
        return true;
      }
    }
    return false;
  }
}
