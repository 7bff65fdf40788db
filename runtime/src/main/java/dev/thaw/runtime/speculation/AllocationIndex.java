package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.AllocationRecord;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * A snapshot of a session's live allocations, sorted by address in primitive arrays, for an O(log n) lookup of
 * the allocation that contains an address. An allocation is {@code [address, address + size)} with the size as
 * asked for: the padding up to the mapping granularity belongs to no allocation. Immutable; allocations never
 * overlap (each has its own reservation).
 */
public final class AllocationIndex {

  static final AllocationIndex EMPTY = new AllocationIndex(new String[0], new long[0], new long[0]);

  private final String[] names;
  private final long[] starts;
  private final long[] ends;

  private AllocationIndex(String[] names, long[] starts, long[] ends) {
    this.names = names;
    this.starts = starts;
    this.ends = ends;
  }

  public static AllocationIndex of(List<AllocationRecord> allocations) {
    List<AllocationRecord> sorted = new ArrayList<>(allocations);
    sorted.sort(Comparator.comparingLong(AllocationRecord::address));
    int n = sorted.size();
    String[] names = new String[n];
    long[] starts = new long[n];
    long[] ends = new long[n];
    for (int i = 0; i < n; i++) {
      AllocationRecord a = sorted.get(i);
      names[i] = a.name();
      starts[i] = a.address();
      ends[i] = a.address() + a.size();
      if (i > 0 && starts[i] < ends[i - 1]) {
        throw new IllegalArgumentException("allocations '" + names[i - 1] + "' and '" + names[i] + "' overlap");
      }
    }
    return new AllocationIndex(names, starts, ends);
  }

  public int size() {
    return names.length;
  }

  /** The position of the allocation containing {@code address}, or -1. */
  public int find(long address) {
    // Addresses are unsigned on the device; device allocations all lie below 2^63, so a negative value is none.
    int lo = 0;
    int hi = starts.length - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      if (starts[mid] <= address) {
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return hi >= 0 && address < ends[hi] ? hi : -1;
  }

  /** The first allocation start above {@code address}, or {@link Long#MAX_VALUE}. */
  public long nextStartAfter(long address) {
    int lo = 0;
    int hi = starts.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (starts[mid] <= address) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo < starts.length ? starts[lo] : Long.MAX_VALUE;
  }

  public String name(int position) {
    return names[position];
  }

  public long start(int position) {
    return starts[position];
  }

  /** One past the allocation's last byte. */
  public long end(int position) {
    return ends[position];
  }

  /** The position of the allocation named {@code name}, or -1; linear. */
  public int positionOf(String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }
}
