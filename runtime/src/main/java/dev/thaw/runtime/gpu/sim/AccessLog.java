package dev.thaw.runtime.gpu.sim;

import java.util.AbstractList;
import java.util.List;

/**
 * The device bytes one launch read, or wrote: disjoint, non-adjacent ranges in ascending order (touching
 * ranges are merged), so two logs of the same accesses are equal whatever order the kernel touched bytes in.
 * Immutable.
 */
public final class AccessLog {

  static final AccessLog EMPTY = new AccessLog(new long[0], new long[0], 0);

  private final long[] starts;
  private final long[] ends;
  private final int count;

  /** Takes ownership of normalised arrays. */
  AccessLog(long[] starts, long[] ends, int count) {
    this.starts = starts;
    this.ends = ends;
    this.count = count;
  }

  /** A log of {@code ranges}, normalised. */
  public static AccessLog of(AddressRange... ranges) {
    AccessRecorder r = new AccessRecorder();
    for (AddressRange range : ranges) {
      r.add(range.start(), range.end());
    }
    return r.toLog();
  }

  public List<AddressRange> ranges() {
    return new AbstractList<>() {
      @Override
      public AddressRange get(int i) {
        if (i < 0 || i >= count) {
          throw new IndexOutOfBoundsException(i);
        }
        return new AddressRange(starts[i], ends[i]);
      }

      @Override
      public int size() {
        return count;
      }
    };
  }

  public int rangeCount() {
    return count;
  }

  public boolean isEmpty() {
    return count == 0;
  }

  /** Bytes touched, each counted once. */
  public long totalBytes() {
    long sum = 0;
    for (int i = 0; i < count; i++) {
      sum += ends[i] - starts[i];
    }
    return sum;
  }

  /** True when every byte of {@code [address, address + bytes)} was touched. */
  public boolean covers(long address, long bytes) {
    int i = find(address);
    return i >= 0 && address + bytes <= ends[i];
  }

  /** True when some byte of {@code range} was touched. */
  public boolean intersects(AddressRange range) {
    // The first range ending after range.start is the only candidate.
    int lo = 0;
    int hi = count;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (ends[mid] <= range.start()) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo < count && starts[lo] < range.end();
  }

  /** True when every byte touched lies in one of {@code allowed}'s ranges. */
  public boolean within(AccessLog allowed) {
    for (int i = 0; i < count; i++) {
      if (!allowed.covers(starts[i], ends[i] - starts[i])) {
        return false;
      }
    }
    return true;
  }

  private int find(long address) {
    int lo = 0;
    int hi = count - 1;
    while (lo <= hi) {
      int mid = (lo + hi) >>> 1;
      if (ends[mid] <= address) {
        lo = mid + 1;
      } else if (starts[mid] > address) {
        hi = mid - 1;
      } else {
        return mid;
      }
    }
    return -1;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof AccessLog other) || other.count != count) {
      return false;
    }
    for (int i = 0; i < count; i++) {
      if (starts[i] != other.starts[i] || ends[i] != other.ends[i]) {
        return false;
      }
    }
    return true;
  }

  @Override
  public int hashCode() {
    int h = count;
    for (int i = 0; i < count; i++) {
      h = 31 * h + Long.hashCode(starts[i]);
      h = 31 * h + Long.hashCode(ends[i]);
    }
    return h;
  }

  @Override
  public String toString() {
    return ranges().toString();
  }
}
