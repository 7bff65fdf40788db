package dev.thaw.runtime.speculation;

import java.util.AbstractList;
import java.util.List;

/**
 * The buffers one launch is speculated to touch, allocation-granular: each live allocation that an 8-byte
 * slot of the parameter buffer points into, with how the kernel may touch it. In slot order, each allocation
 * once. Immutable; it keeps the {@link AllocationIndex} it was made against, so it stays meaningful after
 * the session's allocations change.
 */
public final class AccessSet {

  /**
   * One speculated buffer.
   *
   * @param allocation the allocation's name in the session
   * @param start its first device address
   * @param end one past its last byte
   * @param kind how the kernel may touch it
   */
  public record Access(String allocation, long start, long end, AccessKind kind) {}

  private final AllocationIndex index;
  private final int[] positions;
  private final byte[] bits;
  private final int count;

  AccessSet(AllocationIndex index, int[] positions, byte[] bits, int count) {
    this.index = index;
    this.positions = positions;
    this.bits = bits;
    this.count = count;
  }

  public int size() {
    return count;
  }

  public boolean isEmpty() {
    return count == 0;
  }

  /** The allocations as they were when the set was made. */
  public AllocationIndex allocations() {
    return index;
  }

  /** The {@code i}-th buffer's position in {@link #allocations()}. */
  public int position(int i) {
    check(i);
    return positions[i];
  }

  public String name(int i) {
    check(i);
    return index.name(positions[i]);
  }

  public AccessKind kind(int i) {
    check(i);
    return AccessKind.ofBits(bits[i]);
  }

  /** The kind speculated for the allocation at {@code position} of {@link #allocations()}; null if not in the set. */
  public AccessKind kindAt(int position) {
    for (int i = 0; i < count; i++) {
      if (positions[i] == position) {
        return AccessKind.ofBits(bits[i]);
      }
    }
    return null;
  }

  /** The kind speculated for the allocation named {@code allocation}; null if not in the set. */
  public AccessKind kindOf(String allocation) {
    for (int i = 0; i < count; i++) {
      if (index.name(positions[i]).equals(allocation)) {
        return AccessKind.ofBits(bits[i]);
      }
    }
    return null;
  }

  public List<Access> accesses() {
    return new AbstractList<>() {
      @Override
      public Access get(int i) {
        check(i);
        int p = positions[i];
        return new Access(index.name(p), index.start(p), index.end(p), AccessKind.ofBits(bits[i]));
      }

      @Override
      public int size() {
        return count;
      }
    };
  }

  private void check(int i) {
    if (i < 0 || i >= count) {
      throw new IndexOutOfBoundsException(i);
    }
  }

  @Override
  public String toString() {
    StringBuilder b = new StringBuilder("{");
    for (int i = 0; i < count; i++) {
      b.append(i == 0 ? "" : ", ").append(name(i)).append(": ").append(kind(i));
    }
    return b.append('}').toString();
  }
}
