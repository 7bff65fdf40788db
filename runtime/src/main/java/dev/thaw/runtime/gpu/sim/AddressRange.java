package dev.thaw.runtime.gpu.sim;

/**
 * A half-open range of device addresses, {@code [start, end)}.
 *
 * @param start the first address
 * @param end one past the last address; greater than {@code start}
 */
public record AddressRange(long start, long end) {

  public AddressRange {
    if (end <= start) {
      throw new IllegalArgumentException(String.format("empty range [0x%x, 0x%x)", start, end));
    }
  }

  public static AddressRange of(long start, long bytes) {
    return new AddressRange(start, start + bytes);
  }

  public long size() {
    return end - start;
  }

  /** True when {@code [address, address + bytes)} lies inside this range. */
  public boolean contains(long address, long bytes) {
    return address >= start && bytes >= 0 && address + bytes <= end;
  }

  public boolean overlaps(AddressRange other) {
    return start < other.end && other.start < end;
  }

  @Override
  public String toString() {
    return String.format("[0x%x, 0x%x)", start, end);
  }
}
