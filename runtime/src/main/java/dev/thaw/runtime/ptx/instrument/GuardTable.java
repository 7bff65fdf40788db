package dev.thaw.runtime.ptx.instrument;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The allowed ranges of one launch and room for its violations: what the trailing guard parameter of an
 * instrumented kernel points to. Host-side only; {@link DeviceGuard} holds one on a device.
 *
 * <h2>Layout</h2>
 * Little-endian, 8-byte aligned, {@code n} ranges and room for {@code m} violations:
 * <pre>
 *   0  u64 n                 number of ranges
 *   8  u64 m                 violation records that fit
 *  16  u64 count             violations so far; the device adds 1 per violation (atom.global.add.u64),
 *                            also past m, so count &gt; m says records were dropped
 *  24  u32 magic 'THGT', u32 version 1
 *  32  n x 32 bytes          range i: u64 start, u64 end (exclusive), u64 kinds (bit 1 read, bit 2 write),
 *                            u64 0
 *  32+32n  m x 24 bytes      violation j: u64 address, u32 size, u32 site, u32 kind, u32 0
 * </pre>
 * Addresses are generic ({@code CUdeviceptr}s). An access of kind {@code k} to {@code [a, a+s)} is allowed
 * when one range has {@code start <= a}, {@code a + s <= end} and {@code (kinds & k) == k}; an atomic needs
 * both bits. Ranges are tried in order, so the most used first is fastest.
 */
public final class GuardTable {

  public static final int READ = 1;
  public static final int WRITE = 2;
  public static final int READ_WRITE = READ | WRITE;

  static final int MAX_OFFSET = 8;
  static final int COUNT_OFFSET = 16;
  static final int MAGIC_OFFSET = 24;
  static final int RANGES_OFFSET = 32;
  static final int RANGE_BYTES = 32;
  static final int VIOLATION_BYTES = 24;
  static final int MAGIC = 0x54474854; // "THGT" little-endian
  static final int VERSION = 1;

  /** The default number of violation records. */
  public static final int DEFAULT_MAX_VIOLATIONS = 1024;

  private final long[] starts;
  private final long[] ends;
  private final int[] kinds;
  private final int maxViolations;

  private GuardTable(long[] starts, long[] ends, int[] kinds, int maxViolations) {
    this.starts = starts;
    this.ends = ends;
    this.kinds = kinds;
    this.maxViolations = maxViolations;
  }

  /**
   * Ranges {@code [starts[i], ends[i])} with {@code kinds[i]} ({@link #READ}, {@link #WRITE} or
   * {@link #READ_WRITE}).
   *
   * @throws IllegalArgumentException if the arrays differ in length, a range ends before it starts, a kind is
   *     not 1 to 3 or {@code maxViolations} is negative
   */
  public static GuardTable of(long[] starts, long[] ends, int[] kinds, int maxViolations) {
    if (starts.length != ends.length || starts.length != kinds.length) {
      throw new IllegalArgumentException("starts, ends and kinds differ in length: " + starts.length + ", "
          + ends.length + ", " + kinds.length);
    }
    for (int i = 0; i < starts.length; i++) {
      if (Long.compareUnsigned(ends[i], starts[i]) < 0) {
        throw new IllegalArgumentException(String.format("range %d ends (0x%x) before it starts (0x%x)", i, ends[i],
            starts[i]));
      }
      if (kinds[i] < READ || kinds[i] > READ_WRITE) {
        throw new IllegalArgumentException("range " + i + " has kind " + kinds[i] + "; expected 1, 2 or 3");
      }
    }
    if (maxViolations < 0) {
      throw new IllegalArgumentException("maxViolations must not be negative: " + maxViolations);
    }
    return new GuardTable(starts.clone(), ends.clone(), kinds.clone(), maxViolations);
  }

  public static GuardTable of(long[] starts, long[] ends, int[] kinds) {
    return of(starts, ends, kinds, DEFAULT_MAX_VIOLATIONS);
  }

  /** A fluent way to list ranges. */
  public static Builder builder() {
    return new Builder();
  }

  public int rangeCount() {
    return starts.length;
  }

  public int maxViolations() {
    return maxViolations;
  }

  /** The table's size in bytes. */
  public long byteSize() {
    return sizeFor(starts.length, maxViolations);
  }

  static long sizeFor(int ranges, int maxViolations) {
    return RANGES_OFFSET + (long) RANGE_BYTES * ranges + (long) VIOLATION_BYTES * maxViolations;
  }

  /** Offset of the first violation record. */
  long violationsOffset() {
    return RANGES_OFFSET + (long) RANGE_BYTES * starts.length;
  }

  /** The table as the device reads it, count zero and records zeroed; a direct buffer. */
  public ByteBuffer toBytes() {
    ByteBuffer b = ByteBuffer.allocateDirect(Math.toIntExact(byteSize())).order(ByteOrder.LITTLE_ENDIAN);
    b.putLong(0, starts.length);
    b.putLong(MAX_OFFSET, maxViolations);
    b.putLong(COUNT_OFFSET, 0);
    b.putInt(MAGIC_OFFSET, MAGIC);
    b.putInt(MAGIC_OFFSET + 4, VERSION);
    for (int i = 0; i < starts.length; i++) {
      int at = RANGES_OFFSET + RANGE_BYTES * i;
      b.putLong(at, starts[i]);
      b.putLong(at + 8, ends[i]);
      b.putLong(at + 16, kinds[i]);
    }
    return b;
  }

  /**
   * Reads the violations from a table of this shape as the device left it ({@code count} at 16, records
   * after the ranges), little-endian, from index 0 of {@code table}.
   *
   * @throws IllegalStateException if the table's header is not this one's (overwritten by a kernel?)
   */
  public ViolationReport readViolations(ByteBuffer table) {
    ByteBuffer b = table.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    if (b.getLong(0) != starts.length || b.getLong(MAX_OFFSET) != maxViolations || b.getInt(MAGIC_OFFSET) != MAGIC) {
      throw new IllegalStateException("the guard table's header was changed: " + b.getLong(0) + " ranges, "
          + b.getLong(MAX_OFFSET) + " records, magic 0x" + Integer.toHexString(b.getInt(MAGIC_OFFSET)));
    }
    long total = b.getLong(COUNT_OFFSET);
    int recorded = (int) Math.min(total, maxViolations);
    List<GuardViolation> out = new ArrayList<>(recorded);
    long base = violationsOffset();
    for (int j = 0; j < recorded; j++) {
      int at = Math.toIntExact(base + (long) VIOLATION_BYTES * j);
      out.add(new GuardViolation(b.getInt(at + 12), b.getLong(at), b.getInt(at + 8),
          AccessOp.ofCode(b.getInt(at + 16))));
    }
    return new ViolationReport(total, out);
  }

  @Override
  public String toString() {
    StringBuilder s = new StringBuilder("GuardTable[");
    for (int i = 0; i < starts.length; i++) {
      s.append(i == 0 ? "" : ", ").append(String.format("[0x%x, 0x%x) %s", starts[i], ends[i],
          kinds[i] == READ ? "r" : kinds[i] == WRITE ? "w" : "rw"));
    }
    return s.append("; ").append(maxViolations).append(" records]").toString();
  }

  /** Collects ranges. */
  public static final class Builder {
    private long[] starts = new long[4];
    private long[] ends = new long[4];
    private int[] kinds = new int[4];
    private int n;
    private int maxViolations = DEFAULT_MAX_VIOLATIONS;

    public Builder allow(long start, long size, int kind) {
      if (n == starts.length) {
        starts = Arrays.copyOf(starts, 2 * n);
        ends = Arrays.copyOf(ends, 2 * n);
        kinds = Arrays.copyOf(kinds, 2 * n);
      }
      starts[n] = start;
      ends[n] = start + size;
      kinds[n] = kind;
      n++;
      return this;
    }

    public Builder maxViolations(int max) {
      this.maxViolations = max;
      return this;
    }

    public GuardTable build() {
      return of(Arrays.copyOf(starts, n), Arrays.copyOf(ends, n), Arrays.copyOf(kinds, n), maxViolations);
    }
  }
}
