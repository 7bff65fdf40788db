package dev.thaw.runtime.gpu.cuda;

import java.util.Map;
import java.util.TreeMap;

/**
 * The device addresses this process hands out: one large reservation at a fixed base, sub-allocated here.
 *
 * <p>Why: with unified addressing a device range also takes host addresses, and the driver decides where.
 * {@code cuMemAddressReserve} (driver 580, {@code docs/design/gpu-driver.md}) ignores the hint of a small request
 * and sub-allocates it from its own pool near the top of the address space, where a JVM's mappings differ from
 * process to process; a 1 TiB request at {@code 0x200000000000} is honoured, in a fresh process and in one whose
 * low addresses are taken. So every Thaw process reserves the same arena at the same base (the first
 * of {@link #CANDIDATE_BASES} the driver honours) and places device ranges inside it itself: a range reserved
 * in one process can be reserved at the same address in another, which same-address restore relies on.
 *
 * <p>First fit over a free list of disjoint, coalesced ranges. Thread-safe.
 */
final class DeviceAddressArena {

  /** 1 TiB: more device memory than any one GPU has, a small part of the 47-bit user address space. */
  static final long SIZE = 1L << 40;

  /** 32, 48 and 64 TiB: far from the heap, the libraries, the stacks and the driver's own pool. */
  static final long[] CANDIDATE_BASES = {0x2000_0000_0000L, 0x3000_0000_0000L, 0x4000_0000_0000L};

  private final long base;
  private final long size;
  /** Free ranges, start → end (exclusive), disjoint and never touching (touching ones are merged). */
  private final TreeMap<Long, Long> free = new TreeMap<>();

  DeviceAddressArena(long base, long size) {
    this.base = base;
    this.size = size;
    free.put(base, base + size);
  }

  long base() {
    return base;
  }

  long size() {
    return size;
  }

  /** True if {@code [address, address + length)} lies inside the arena. */
  boolean contains(long address, long length) {
    return address >= base && length <= size && address - base <= size - length;
  }

  /** The lowest free, {@code alignment}-aligned address with {@code length} free bytes after it; 0 if none. */
  synchronized long allocate(long length, long alignment) {
    for (Map.Entry<Long, Long> f : free.entrySet()) {
      long start = (f.getKey() + alignment - 1) / alignment * alignment;
      if (start <= f.getValue() - length) {
        take(f.getKey(), f.getValue(), start, start + length);
        return start;
      }
    }
    return 0;
  }

  /** The highest free, {@code alignment}-aligned address with {@code length} free bytes after it; 0 if none. */
  synchronized long allocateTop(long length, long alignment) {
    for (Map.Entry<Long, Long> f : free.descendingMap().entrySet()) {
      long start = (f.getValue() - length) / alignment * alignment;
      if (f.getValue() - f.getKey() >= length && start >= f.getKey()) {
        take(f.getKey(), f.getValue(), start, start + length);
        return start;
      }
    }
    return 0;
  }

  /** Takes exactly {@code [address, address + length)} if all of it is free; true if it did. */
  synchronized boolean allocateAt(long address, long length) {
    Map.Entry<Long, Long> f = free.floorEntry(address);
    if (f == null || f.getValue() < address + length) {
      return false;
    }
    take(f.getKey(), f.getValue(), address, address + length);
    return true;
  }

  /** Returns a range handed out earlier. */
  synchronized void release(long address, long length) {
    long start = address;
    long end = address + length;
    Map.Entry<Long, Long> before = free.floorEntry(start);
    if (before != null && before.getValue() > start) {
      throw new IllegalStateException(String.format("[0x%x, 0x%x) is already free", start, end));
    }
    if (before != null && before.getValue() == start) {
      start = before.getKey();
      free.remove(before.getKey());
    }
    Long after = free.ceilingKey(address);
    if (after != null && after < end) {
      throw new IllegalStateException(String.format("[0x%x, 0x%x) is already free", address, end));
    }
    if (after != null && after == end) {
      end = free.remove(after);
    }
    free.put(start, end);
  }

  private void take(long freeStart, long freeEnd, long start, long end) {
    free.remove(freeStart);
    if (freeStart < start) {
      free.put(freeStart, start);
    }
    if (end < freeEnd) {
      free.put(end, freeEnd);
    }
  }
}
