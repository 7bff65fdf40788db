package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A {@link GuardTable} in device memory: the address an instrumented kernel takes as its last argument.
 *
 * <p>{@link #load}, {@link #reset} and {@link #read} copy synchronously through the context (complete when they
 * return, see {@link GpuContext}) and do not order against streams: the caller makes sure no launch that uses
 * this table is in flight (synchronize its stream).
 */
public final class DeviceGuard implements AutoCloseable {

  private final GpuContext context;
  private DeviceBuffer buffer;
  private GuardTable table;
  private final AtomicBoolean closed = new AtomicBoolean();

  private DeviceGuard(GpuContext context, GuardTable table) {
    this.context = context;
    load(table);
  }

  /** Allocates device memory for {@code table} and copies it there, count zero. */
  public static DeviceGuard upload(GpuContext context, GuardTable table) {
    return new DeviceGuard(context, table);
  }

  /** The device address of the table: the value of an instrumented kernel's last parameter. */
  public long address() {
    checkOpen();
    return buffer.address();
  }

  public GuardTable table() {
    return table;
  }

  /**
   * Replaces the table and clears the violations. Keeps the device buffer when the table fits; else the
   * buffer, and so {@link #address()}, change.
   */
  public void load(GuardTable newTable) {
    checkOpen();
    if (buffer == null || newTable.byteSize() > buffer.mappedSize()) {
      if (buffer != null) {
        buffer.close();
      }
      buffer = context.allocate(newTable.byteSize());
    }
    buffer.copyFromHost(newTable.toBytes());
    this.table = newTable;
  }

  /** Clears the violation count (records past it are ignored), keeping the ranges. */
  public void reset() {
    checkOpen();
    ByteBuffer zero = ByteBuffer.allocateDirect(8).order(ByteOrder.LITTLE_ENDIAN);
    context.copyHostToDevice(buffer.address() + GuardTable.COUNT_OFFSET, zero);
  }

  /** The violations recorded since the last {@link #load} or {@link #reset}. */
  public ViolationReport read() {
    checkOpen();
    ByteBuffer b = ByteBuffer.allocateDirect(Math.toIntExact(table.byteSize())).order(ByteOrder.LITTLE_ENDIAN);
    context.copyDeviceToHost(b, buffer.address());
    return table.readViolations(b);
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("device guard is closed");
    }
  }

  /** Frees the device memory. Idempotent. */
  @Override
  public void close() {
    if (closed.compareAndSet(false, true) && buffer != null) {
      buffer.close();
    }
  }
}
