package dev.thaw.runtime.function;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Set;

/**
 * How a rebuilt session maps a table's allocations: a few slabs, each one reservation, one physical allocation,
 * one map and one access grant, instead of one of each per buffer (GPT-2-large's 518 buffers cost 42-62 ms
 * mapped one by one).
 *
 * <p>Computed from the recorded addresses and sizes alone, so it serves images built before packing (each
 * buffer on its own granularity-aligned pages, usually back to back) and packed ones (buffers 256-byte aligned
 * inside slabs) alike. Buffers that share a page must share physical memory; they form a group. Adjacent groups
 * merge into one slab when they are of one kind: read-only (every buffer in the group is in the given read-only
 * set) or not. So a read-only slab holds read-only buffers only, whole, and can be kept on the device, exported and
 * mapped read-only by another worker without anything writable riding along.
 *
 * @param slabs in address order, disjoint, each a granularity-aligned range
 */
public record MapPlan(List<Slab> slabs) {

  /**
   * One slab.
   *
   * @param address granularity-aligned start
   * @param size a multiple of the granularity
   * @param readOnly every buffer in it is read-only
   * @param buffers the names of the buffers inside, in address order
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
    List<Slab> groups = new ArrayList<>();
    long start = 0;
    long end = 0;
    long lastByte = Long.MIN_VALUE;
    boolean ro = true;
    List<String> names = new ArrayList<>();
    for (AllocationRecord a : sorted) {
      if (a.address() < lastByte) {
        throw new IllegalArgumentException(String.format("allocation '%s' at 0x%x overlaps the one before it", a.name(),
            a.address()));
      }
      long first = a.address() & -granularity;
      long last = (a.address() + a.size() + granularity - 1) & -granularity;
      if (names.isEmpty() || first >= end) {
        if (!names.isEmpty()) {
          groups.add(new Slab(start, end - start, ro, names));
        }
        start = first;
        end = last;
        ro = true;
        names = new ArrayList<>();
      }
      end = Math.max(end, last);
      ro &= readOnly.contains(a.name());
      names.add(a.name());
      lastByte = a.address() + a.size();
    }
    if (!names.isEmpty()) {
      groups.add(new Slab(start, end - start, ro, names));
    }
    List<Slab> slabs = new ArrayList<>();
    for (Slab g : groups) {
      Slab prev = slabs.isEmpty() ? null : slabs.get(slabs.size() - 1);
      if (prev != null && prev.end() == g.address() && prev.readOnly() == g.readOnly()) {
        List<String> merged = new ArrayList<>(prev.buffers());
        merged.addAll(g.buffers());
        slabs.set(slabs.size() - 1, new Slab(prev.address(), prev.size() + g.size(), prev.readOnly(), merged));
      } else {
        slabs.add(g);
      }
    }
    return new MapPlan(slabs);
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
