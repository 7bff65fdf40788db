package dev.thaw.runtime.gpu;

import java.nio.ByteBuffer;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Device memory that owns its address range, its physical memory and their mapping: what
 * {@link GpuContext#allocate} returns. Closing it unmaps, releases and frees, in that order.
 */
public final class DeviceBuffer implements AutoCloseable {

  private final GpuContext context;
  private final long size;
  private final VirtualRange range;
  private final PhysicalMemory memory;
  private final Mapping mapping;
  private final AtomicBoolean closed = new AtomicBoolean();

  private DeviceBuffer(GpuContext context, long size, VirtualRange range, PhysicalMemory memory, Mapping mapping) {
    this.context = context;
    this.size = size;
    this.range = range;
    this.memory = memory;
    this.mapping = mapping;
  }

  static DeviceBuffer allocate(GpuContext context, long size, long address, boolean exact) {
    long rounded = rounded(context, size);
    return map(context, size, exact ? context.reserveExact(address, rounded) : context.reserve(rounded, address));
  }

  static DeviceBuffer allocateScratch(GpuContext context, long size) {
    return map(context, size, context.reserveScratch(rounded(context, size)));
  }

  private static long rounded(GpuContext context, long size) {
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    long g = context.granularity();
    return (size + g - 1) / g * g;
  }

  private static DeviceBuffer map(GpuContext context, long size, VirtualRange range) {
    long rounded = range.size();
    PhysicalMemory memory = null;
    try {
      memory = context.createMemory(rounded);
      Mapping mapping = range.map(0, memory);
      mapping.setAccess(MemoryAccess.READ_WRITE);
      return new DeviceBuffer(context, size, range, memory, mapping);
    } catch (RuntimeException e) {
      if (memory != null) {
        memory.close();
      }
      range.close();
      throw e;
    }
  }

  public GpuContext context() {
    return context;
  }

  /** The device address of the first byte. */
  public long address() {
    checkOpen();
    return range.address();
  }

  /** The size asked for. */
  public long size() {
    return size;
  }

  /** The size mapped: {@link #size()} rounded up to the granularity. */
  public long mappedSize() {
    return range.size();
  }

  public void setAccess(MemoryAccess access) {
    checkOpen();
    mapping.setAccess(access);
  }

  /** Grants another device {@code access} to this buffer: see {@link Mapping#setAccessFor}. */
  public void setAccessFor(int deviceOrdinal, MemoryAccess access) {
    checkOpen();
    mapping.setAccessFor(deviceOrdinal, access);
  }

  /** Copies {@code src.remaining()} bytes to the start of this buffer. */
  public void copyFromHost(ByteBuffer src) {
    checkFits(src.remaining());
    context.copyHostToDevice(address(), src);
  }

  /** Fills {@code dst.remaining()} bytes from the start of this buffer. */
  public void copyToHost(ByteBuffer dst) {
    checkFits(dst.remaining());
    context.copyDeviceToHost(dst, address());
  }

  private void checkFits(long bytes) {
    if (bytes > mappedSize()) {
      throw new IllegalArgumentException(bytes + " bytes do not fit in a buffer of " + mappedSize());
    }
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("device buffer is closed");
    }
  }

  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    try {
      mapping.close();
      memory.close();
    } finally {
      range.close();
    }
  }

  @Override
  public String toString() {
    return String.format("DeviceBuffer[0x%x, %d bytes]", range.address(), size);
  }
}
