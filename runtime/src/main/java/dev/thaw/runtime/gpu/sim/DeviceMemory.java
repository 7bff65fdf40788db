package dev.thaw.runtime.gpu.sim;

import static dev.thaw.runtime.gpu.sim.SimNative.BYTE_BASE;
import static dev.thaw.runtime.gpu.sim.SimNative.FLOAT_BASE;
import static dev.thaw.runtime.gpu.sim.SimNative.INT_BASE;
import static dev.thaw.runtime.gpu.sim.SimNative.SHORT_BASE;
import static dev.thaw.runtime.gpu.sim.SimNative.U;

import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.Objects;

/**
 * Device memory as a Java kernel sees it: loads and stores at absolute device addresses, little-endian.
 *
 * <p><b>Checked.</b> Every access is checked against the device's mappings before memory is touched: a byte
 * that is not mapped, mapped without access, or (for a store) mapped {@link
 * MemoryAccess#READ READ}-only is an illegal address. The access throws, the launch ends
 * there, and the context is poisoned with {@code CUDA_ERROR_ILLEGAL_ADDRESS} (700), reported at the next
 * synchronization, as on a GPU. Catching the exception does not save the launch: the view stays faulted and
 * every later access throws too. A bulk access is checked whole before any byte moves; it may span mappings
 * that are contiguous in the address space.
 *
 * <p><b>Recorded.</b> The exact bytes read and written are recorded, and after the launch reported to
 * {@link SimContext#addLaunchListener launch listeners}. Read what you need and write what you mean: a
 * read-modify-write counts as both.
 *
 * <p><b>Fast.</b> The last mapping hit for loads and for stores is cached and nothing is allocated per access,
 * so a sequential sweep costs a few compares per element. Prefer the bulk methods for long runs.
 *
 * <p>One view per launch, valid only during {@link SimKernel#launch} and only on the thread that called it
 * (it is not thread-safe). Misaligned accesses are allowed (a GPU would fault with
 * {@code CUDA_ERROR_MISALIGNED_ADDRESS}); a scalar access that straddles two mappings is an illegal address.
 */
public final class DeviceMemory {

  // Cached segments: a hit is start <= a && a <= end - len. Empty caches are (1, 0), which no address hits.
  private long rStart = 1;
  private long rEnd = 0;
  private long rDelta;
  private long wStart = 1;
  private long wEnd = 0;
  private long wDelta;

  private SimAddressSpace.Segment[] segments;
  private final AccessRecorder reads = new AccessRecorder();
  private final AccessRecorder writes = new AccessRecorder();
  private String fault;
  private boolean ended;

  DeviceMemory(SimAddressSpace.Segment[] segments) {
    this.segments = segments;
  }

  // ---- scalars ----

  public byte getByte(long address) {
    return U.getByte(r(address, 1));
  }

  public void putByte(long address, byte value) {
    U.putByte(w(address, 1), value);
  }

  public short getShort(long address) {
    return U.getShort(r(address, 2));
  }

  public void putShort(long address, short value) {
    U.putShort(w(address, 2), value);
  }

  public int getInt(long address) {
    return U.getInt(r(address, 4));
  }

  public void putInt(long address, int value) {
    U.putInt(w(address, 4), value);
  }

  public long getLong(long address) {
    return U.getLong(r(address, 8));
  }

  public void putLong(long address, long value) {
    U.putLong(w(address, 8), value);
  }

  public float getFloat(long address) {
    return U.getFloat(r(address, 4));
  }

  public void putFloat(long address, float value) {
    U.putFloat(w(address, 4), value);
  }

  public double getDouble(long address) {
    return U.getDouble(r(address, 8));
  }

  public void putDouble(long address, double value) {
    U.putDouble(w(address, 8), value);
  }

  // ---- bulk: len elements between device memory at address and array[off, off + len) ----

  public void getBytes(long address, byte[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkRead(address, array, BYTE_BASE + off, len);
  }

  public void putBytes(long address, byte[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkWrite(address, array, BYTE_BASE + off, len);
  }

  public void getShorts(long address, short[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkRead(address, array, SHORT_BASE + 2L * off, 2L * len);
  }

  public void putShorts(long address, short[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkWrite(address, array, SHORT_BASE + 2L * off, 2L * len);
  }

  public void getInts(long address, int[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkRead(address, array, INT_BASE + 4L * off, 4L * len);
  }

  public void putInts(long address, int[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkWrite(address, array, INT_BASE + 4L * off, 4L * len);
  }

  public void getFloats(long address, float[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkRead(address, array, FLOAT_BASE + 4L * off, 4L * len);
  }

  public void putFloats(long address, float[] array, int off, int len) {
    Objects.checkFromIndexSize(off, len, array.length);
    bulkWrite(address, array, FLOAT_BASE + 4L * off, 4L * len);
  }

  // ---- checks ----

  private long r(long a, int len) {
    if (a >= rStart && a <= rEnd - len) {
      reads.add(a, a + len);
      return a + rDelta;
    }
    return readSlow(a, len);
  }

  private long w(long a, int len) {
    if (a >= wStart && a <= wEnd - len) {
      writes.add(a, a + len);
      return a + wDelta;
    }
    return writeSlow(a, len);
  }

  private long readSlow(long a, int len) {
    SimAddressSpace.Segment s = resolve(a, len, false);
    rStart = s.start;
    rEnd = s.end;
    rDelta = s.delta;
    reads.add(a, a + len);
    return a + s.delta;
  }

  private long writeSlow(long a, int len) {
    SimAddressSpace.Segment s = resolve(a, len, true);
    wStart = s.start;
    wEnd = s.end;
    wDelta = s.delta;
    writes.add(a, a + len);
    return a + s.delta;
  }

  private SimAddressSpace.Segment resolve(long a, int len, boolean write) {
    checkLive();
    SimAddressSpace.Segment s = SimAddressSpace.find(segments, a);
    String why;
    if (s == null) {
      why = "not mapped";
    } else if (!s.readable) {
      why = "mapped without access";
    } else if (write && !s.writable) {
      why = "mapped read-only";
    } else if (a > s.end - len) {
      why = "crosses the end of its mapping";
    } else {
      return s;
    }
    throw fault(String.format("%s of %d bytes at 0x%x: %s", write ? "store" : "load", len, a, why));
  }

  private void bulkRead(long a, Object base, long offset, long bytes) {
    if (bytes == 0) {
      return;
    }
    if (!(a >= rStart && a <= rEnd - bytes)) {
      checkBulk(a, bytes, false);
    }
    reads.add(a, a + bytes);
    SimAddressSpace.read(segments, a, base, offset, bytes);
  }

  private void bulkWrite(long a, Object base, long offset, long bytes) {
    if (bytes == 0) {
      return;
    }
    if (!(a >= wStart && a <= wEnd - bytes)) {
      checkBulk(a, bytes, true);
    }
    writes.add(a, a + bytes);
    SimAddressSpace.write(segments, a, base, offset, bytes);
  }

  private void checkBulk(long a, long bytes, boolean write) {
    checkLive();
    String why = SimAddressSpace.checkAccess(segments, a, bytes, write);
    if (why != null) {
      throw fault(String.format("%s of %d bytes at 0x%x: %s", write ? "store" : "load", bytes, a, why));
    }
  }

  private void checkLive() {
    if (fault != null) {
      throw new IllegalAddressFault("the launch already faulted: " + fault);
    }
    if (ended) {
      throw new IllegalStateException("this device memory view belongs to a launch that has ended");
    }
  }

  private IllegalAddressFault fault(String why) {
    fault = why;
    invalidate();
    return new IllegalAddressFault(why);
  }

  /** Every later access goes through the slow path, which throws. */
  private void invalidate() {
    rStart = 1;
    rEnd = 0;
    wStart = 1;
    wEnd = 0;
    segments = new SimAddressSpace.Segment[0];
  }

  // ---- for the launch ----

  /** Ends the view; returns the fault, or null. */
  String end() {
    ended = true;
    invalidate();
    return fault;
  }

  AccessLog reads() {
    return reads.toLog();
  }

  AccessLog writes() {
    return writes.toLog();
  }
}
