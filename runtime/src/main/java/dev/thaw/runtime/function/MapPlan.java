package dev.thaw.runtime.function;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;

/**
 * How a rebuilt session maps a table's allocations: a few slabs, each one reservation, one physical allocation,
 * one map and one access grant, instead of one of each per buffer: a model has hundreds of buffers, and the driver's
 * calls cost per call ({@code docs/design/memory-tiers.md}, "Packed allocations").
 *
 * <p>Computed from the recorded addresses and sizes alone, so it serves images built before packing (each
 * buffer on its own granularity-aligned pages, usually back to back) and packed ones (buffers 256-byte aligned
 * inside slabs) alike. The pages the buffers touch form runs; a run is cut where it changes between pages that
 * only read-only buffers touch and pages some other buffer touches, and adjacent pieces of one kind merge. So a
 * read-only slab holds bytes of read-only buffers only, and can be kept on the device, exported and mapped
 * read-only by another worker without anything writable riding along; a read-only buffer that shares its first
 * or last page with a written one lies partly in a read-write slab (packed buffers have no page boundaries to
 * cut at), and its bytes there are restored like any other.
 *
 * @param slabs in address order, disjoint, each a granularity-aligned range
 */
public record MapPlan(List<Slab> slabs) {

  /**
   * One slab.
   *
   * @param address granularity-aligned start
   * @param size a multiple of the granularity
   * @param readOnly only read-only buffers have bytes in it
   * @param buffers the names of the buffers with bytes in it, in address order
   */
  public record Slab(long address, long size, boolean readOnly, List<String> buffers) {

    public Slab {
      buffers = List.copyOf(buffers);
    }

    public long end() {
      return address + size;
    }
  }

  public MapPlan {
    slabs = List.copyOf(slabs);
  }

  /**
   * The plan for {@code allocations}.
   *
   * @param readOnly names of buffers no kernel writes; empty to put everything in read-write slabs
   * @throws IllegalArgumentException if two allocations overlap
   */
  public static MapPlan of(List<AllocationRecord> allocations, Set<String> readOnly, long granularity) {
    List<AllocationRecord> sorted = new ArrayList<>(allocations);
    sorted.sort(Comparator.comparingLong(AllocationRecord::address));
    // Runs of touched pages, and the pages a written buffer touches, both as [start, end) lists in order.
    List<long[]> runs = new ArrayList<>();
    List<long[]> written = new ArrayList<>();
    long lastByte = Long.MIN_VALUE;
    for (AllocationRecord a : sorted) {
      if (a.address() < lastByte) {
        throw new IllegalArgumentException(String.format("allocation '%s' at 0x%x overlaps the one before it", a.name(),
            a.address()));
      }
      lastByte = a.address() + a.size();
      long first = a.address() & -granularity;
      long last = (a.address() + a.size() + granularity - 1) & -granularity;
      add(runs, first, last);
      if (!readOnly.contains(a.name())) {
        add(written, first, last);
      }
    }
    List<long[]> pieces = new ArrayList<>();
    int w = 0;
    for (long[] run : runs) {
      long at = run[0];
      while (w < written.size() && written.get(w)[1] <= at) {
        w++;
      }
      for (int i = w; i < written.size() && written.get(i)[0] < run[1]; i++) {
        long[] iv = written.get(i);
        if (iv[0] > at) {
          pieces.add(new long[] {at, iv[0], 1});
        }
        long end = Math.min(iv[1], run[1]);
        pieces.add(new long[] {Math.max(iv[0], at), end, 0});
        at = end;
      }
      if (at < run[1]) {
        pieces.add(new long[] {at, run[1], 1});
      }
    }
    List<long[]> merged = new ArrayList<>();
    for (long[] p : pieces) {
      long[] prev = merged.isEmpty() ? null : merged.get(merged.size() - 1);
      if (prev != null && prev[1] == p[0] && prev[2] == p[2]) {
        prev[1] = p[1];
      } else {
        merged.add(p.clone());
      }
    }
    List<Slab> slabs = new ArrayList<>(merged.size());
    int from = 0;
    for (long[] p : merged) {
      while (from < sorted.size() && sorted.get(from).address() + sorted.get(from).size() <= p[0]) {
        from++;
      }
      List<String> names = new ArrayList<>();
      for (int i = from; i < sorted.size() && sorted.get(i).address() < p[1]; i++) {
        names.add(sorted.get(i).name());
      }
      slabs.add(new Slab(p[0], p[1] - p[0], p[2] == 1, names));
    }
    return new MapPlan(slabs);
  }

  /** Adds {@code [start, end)} to intervals in order, merging it with the last one when they touch. */
  private static void add(List<long[]> intervals, long start, long end) {
    long[] last = intervals.isEmpty() ? null : intervals.get(intervals.size() - 1);
    if (last != null && start <= last[1]) {
      last[1] = Math.max(last[1], end);
    } else {
      intervals.add(new long[] {start, end});
    }
  }

  /** Bytes mapped: the slabs' sizes. */
  public long mappedBytes() {
    return slabs.stream().mapToLong(Slab::size).sum();
  }

  /** The read-only slabs. */
  public List<Slab> readOnlySlabs() {
    return slabs.stream().filter(Slab::readOnly).toList();
  }
}
