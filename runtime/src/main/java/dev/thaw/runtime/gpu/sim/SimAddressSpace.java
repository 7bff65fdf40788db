package dev.thaw.runtime.gpu.sim;

import static dev.thaw.runtime.gpu.sim.SimNative.U;

import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * The device's virtual address space and its physical memory, shared by every context of one driver (as
 * unified addressing shares one space per process).
 *
 * <p>Addresses are handed out deterministically from {@link #BASE}, first fit, so a second driver (a second
 * process) that asks for the same hint gets the same address.
 *
 * <p>Each device sees the space through its own published {@link #segments(int)} array: the same mappings, with the
 * access that device was granted (a mapping of another device's memory is unreadable to a device that was not
 * granted access, as on a GPU).
 *
 * <p>Invariants: the published arrays are sorted, disjoint and immutable; they change only
 * under {@link #vmLock}. Host memory behind a segment is freed only under the write half of
 * {@link #memoryLock}; anything that dereferences device memory (kernels, copies) holds the read half and
 * resolves addresses against a snapshot taken under it, so the JVM never touches freed memory.
 */
final class SimAddressSpace {

  static final long GRANULARITY = 2L << 20;
  static final long BASE = 0x7f00_0000_0000L;
  static final long LIMIT = 0x7fff_ffe0_0000L;

  /**
   * Mapped memory as one device sees it: device {@code [start, end)} lives at host {@code address + delta}, is
   * physically on device {@code location}, and is readable / writable by the device whose view this is.
   */
  static final class Segment {
    final long start;
    final long end;
    final long delta;
    final int location;
    final boolean readable;
    final boolean writable;

    Segment(long start, long end, long hostBase, int location, MemoryAccess access) {
      this.start = start;
      this.end = end;
      this.delta = hostBase - start;
      this.location = location;
      this.readable = access != null;
      this.writable = access == MemoryAccess.READ_WRITE;
    }
  }

  private static final Segment[] NONE = new Segment[0];

  private final Object vmLock = new Object();
  private final TreeMap<Long, SimVirtualRange> reservations = new TreeMap<>();
  /** By device ordinal. */
  private volatile Segment[][] segments;
  private final ReentrantReadWriteLock memoryLock = new ReentrantReadWriteLock();

  SimAddressSpace(int devices) {
    Segment[][] none = new Segment[devices][];
    Arrays.fill(none, NONE);
    this.segments = none;
  }

  /** The space as device {@code device} sees it. */
  Segment[] segments(int device) {
    return segments[device];
  }

  Lock readLock() {
    return memoryLock.readLock();
  }

  Lock writeLock() {
    return memoryLock.writeLock();
  }

  SimVirtualRange reserve(SimContext context, long size, long address, boolean exact) {
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    if (size > LIMIT - BASE) {
      throw CudaError.exception("cuMemAddressReserve", CudaError.CUDA_ERROR_OUT_OF_MEMORY,
          size + " bytes exceed the device's address space");
    }
    long rounded = roundUp(size);
    if (address % GRANULARITY != 0) {
      throw new IllegalArgumentException(String.format("address 0x%x is not a multiple of the granularity (%d)",
          address, GRANULARITY));
    }
    synchronized (vmLock) {
      long at;
      if (exact) {
        if (address < BASE || address > LIMIT - rounded) {
          throw new AddressUnavailableException(address, rounded, String.format(
              "outside the simulated device's address space [0x%x, 0x%x)", BASE, LIMIT));
        }
        SimVirtualRange taken = overlapping(address, rounded);
        if (taken != null) {
          throw new AddressUnavailableException(address, rounded, "overlaps the reserved range " + taken.describe());
        }
        at = address;
      } else {
        at = address != 0 ? firstFit(address, rounded) : -1;
        if (at < 0) {
          at = firstFit(BASE, rounded);
        }
        if (at < 0) {
          throw CudaError.exception("cuMemAddressReserve", CudaError.CUDA_ERROR_OUT_OF_MEMORY,
              "no free range of " + rounded + " bytes");
        }
      }
      SimVirtualRange range = new SimVirtualRange(context, this, at, rounded);
      reservations.put(at, range);
      return range;
    }
  }

  /** A range at the highest free place of the space: what {@code GpuContext.reserveScratch} takes. */
  SimVirtualRange reserveTop(SimContext context, long size) {
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    if (size > LIMIT - BASE) {
      throw CudaError.exception("cuMemAddressReserve", CudaError.CUDA_ERROR_OUT_OF_MEMORY,
          size + " bytes exceed the device's address space");
    }
    long rounded = roundUp(size);
    synchronized (vmLock) {
      long candidate = LIMIT - rounded;
      while (candidate >= BASE) {
        SimVirtualRange r = overlapping(candidate, rounded);
        if (r == null) {
          SimVirtualRange range = new SimVirtualRange(context, this, candidate, rounded);
          reservations.put(candidate, range);
          return range;
        }
        candidate = r.address() - rounded;
      }
      throw CudaError.exception("cuMemAddressReserve", CudaError.CUDA_ERROR_OUT_OF_MEMORY,
          "no free range of " + rounded + " bytes");
    }
  }

  /** The lowest free, granularity-aligned start at or after {@code from}, or -1. */
  private long firstFit(long from, long size) {
    long candidate = Math.max(from, BASE);
    while (candidate <= LIMIT - size) {
      SimVirtualRange r = overlapping(candidate, size);
      if (r == null) {
        return candidate;
      }
      candidate = r.address() + r.size();
    }
    return -1;
  }

  /** The reservation with the highest start that overlaps {@code [start, start + size)}, or null. */
  private SimVirtualRange overlapping(long start, long size) {
    Map.Entry<Long, SimVirtualRange> e = reservations.lowerEntry(start + size);
    if (e == null) {
      return null;
    }
    SimVirtualRange r = e.getValue();
    return r.address() + r.size() > start ? r : null;
  }

  void release(SimVirtualRange range) {
    synchronized (vmLock) {
      reservations.remove(range.address(), range);
    }
  }

  /** Republishes the segments after a mapping or an access change. Callers that free memory hold the write lock. */
  void republish() {
    synchronized (vmLock) {
      Segment[][] next = new Segment[segments.length][];
      for (int d = 0; d < next.length; d++) {
        List<Segment> out = new ArrayList<>();
        for (SimVirtualRange r : reservations.values()) {
          r.addSegments(out, d);
        }
        next[d] = out.toArray(NONE);
      }
      segments = next;
    }
  }

  static long roundUp(long size) {
    return (size + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
  }

  // ---- lookups ----

  /** The segment holding {@code address}, or null. */
  static Segment find(Segment[] segs, long address) {
    int lo = 0;
    int hi = segs.length - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      Segment s = segs[mid];
      if (s.end <= address) {
        lo = mid + 1;
      } else if (s.start > address) {
        hi = mid - 1;
      } else {
        return s;
      }
    }
    return null;
  }

  /**
   * Null when all of {@code [address, address + bytes)} is mapped with the access needed (it may span
   * contiguous mappings); else why not, naming the first byte that is not.
   */
  static String checkAccess(Segment[] segs, long address, long bytes, boolean write) {
    if (bytes < 0) {
      return "negative size " + bytes;
    }
    if (address + bytes < address) {
      return String.format("range at 0x%x of %d bytes wraps around", address, bytes);
    }
    long a = address;
    long end = address + bytes;
    while (a < end) {
      Segment s = find(segs, a);
      if (s == null) {
        return String.format("0x%x is not mapped", a);
      }
      if (!s.readable) {
        return String.format("0x%x is mapped without access", a);
      }
      if (write && !s.writable) {
        return String.format("0x%x is mapped read-only", a);
      }
      a = s.end;
    }
    return null;
  }

  // ---- copies: callers checked the range against the same snapshot and hold the read lock ----

  /** Device → host (or Java array when {@code base} is an array). */
  static void read(Segment[] segs, long device, Object base, long offset, long bytes) {
    while (bytes > 0) {
      Segment s = find(segs, device);
      long n = Math.min(bytes, s.end - device);
      U.copyMemory(null, device + s.delta, base, offset, n);
      device += n;
      offset += n;
      bytes -= n;
    }
  }

  /** Host (or Java array) → device. */
  static void write(Segment[] segs, long device, Object base, long offset, long bytes) {
    while (bytes > 0) {
      Segment s = find(segs, device);
      long n = Math.min(bytes, s.end - device);
      U.copyMemory(base, offset, null, device + s.delta, n);
      device += n;
      offset += n;
      bytes -= n;
    }
  }

  static void copy(Segment[] segs, long dst, long src, long bytes) {
    while (bytes > 0) {
      Segment d = find(segs, dst);
      Segment s = find(segs, src);
      long n = Math.min(bytes, Math.min(d.end - dst, s.end - src));
      U.copyMemory(null, src + s.delta, null, dst + d.delta, n);
      dst += n;
      src += n;
      bytes -= n;
    }
  }

  /** Copies between two views' ranges (views of one space differ only in access, not in where bytes live). */
  static void copyBetween(Segment[] from, long src, Segment[] to, long dst, long bytes) {
    while (bytes > 0) {
      Segment d = find(to, dst);
      Segment s = find(from, src);
      long n = Math.min(bytes, Math.min(d.end - dst, s.end - src));
      U.copyMemory(null, src + s.delta, null, dst + d.delta, n);
      dst += n;
      src += n;
      bytes -= n;
    }
  }

  static void fill8(Segment[] segs, long dst, byte value, long bytes) {
    while (bytes > 0) {
      Segment d = find(segs, dst);
      long n = Math.min(bytes, d.end - dst);
      U.setMemory(dst + d.delta, n, value);
      dst += n;
      bytes -= n;
    }
  }

  /** Fills {@code count} 32-bit words; {@code dst} is 4-aligned, so no word straddles a mapping. */
  static void fill32(Segment[] segs, long dst, int value, long count) {
    long bytes = count * 4;
    while (bytes > 0) {
      Segment d = find(segs, dst);
      long n = Math.min(bytes, d.end - dst);
      long p = dst + d.delta;
      if ((value & 0xff) * 0x01010101 == value) {
        U.setMemory(p, n, (byte) value);
      } else {
        long first = Math.min(n, 4096);
        for (long i = 0; i < first; i += 4) {
          U.putInt(p + i, value);
        }
        // Doubling copies of the pattern already written.
        for (long done = first; done < n; ) {
          long c = Math.min(done, n - done);
          U.copyMemory(p, p + done, c);
          done += c;
        }
      }
      dst += n;
      bytes -= n;
    }
  }
}
