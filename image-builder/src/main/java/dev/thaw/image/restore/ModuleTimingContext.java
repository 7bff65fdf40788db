package dev.thaw.image.restore;

import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;

/**
 * A context that passes everything through and adds up the time spent loading modules, so that
 * {@link dev.thaw.runtime.function.FunctionSession#rebuild}, which maps and loads in one call, can be reported as
 * two phases. Closing it does not close the context it wraps: the restore does not own that.
 */
final class ModuleTimingContext implements GpuContext {

  private final GpuContext delegate;
  private long moduleNanos;

  ModuleTimingContext(GpuContext delegate) {
    this.delegate = delegate;
  }

  long moduleNanos() {
    return moduleNanos;
  }

  @Override
  public GpuModule loadPtx(String ptx) {
    long t = System.nanoTime();
    try {
      return delegate.loadPtx(ptx);
    } finally {
      moduleNanos += System.nanoTime() - t;
    }
  }

  @Override
  public GpuModule loadCubin(byte[] image) {
    long t = System.nanoTime();
    try {
      return delegate.loadCubin(image);
    } finally {
      moduleNanos += System.nanoTime() - t;
    }
  }

  @Override
  public GpuDriver driver() {
    return delegate.driver();
  }

  @Override
  public DeviceInfo device() {
    return delegate.device();
  }

  @Override
  public void makeCurrent() {
    delegate.makeCurrent();
  }

  @Override
  public void synchronize() {
    delegate.synchronize();
  }

  @Override
  public long granularity() {
    return delegate.granularity();
  }

  @Override
  public VirtualRange reserve(long size, long addressHint) {
    return delegate.reserve(size, addressHint);
  }

  @Override
  public VirtualRange reserveExact(long address, long size) {
    return delegate.reserveExact(address, size);
  }

  @Override
  public PhysicalMemory createMemory(long size) {
    return delegate.createMemory(size);
  }

  @Override
  public PhysicalMemory createExportableMemory(long size) {
    return delegate.createExportableMemory(size);
  }

  @Override
  public PhysicalMemory importMemory(int fd, long size) {
    return delegate.importMemory(fd, size);
  }

  @Override
  public PinnedBuffer allocatePinned(long size) {
    return delegate.allocatePinned(size);
  }

  @Override
  public PinnedBuffer registerHost(long address, long size, boolean readOnly) {
    return delegate.registerHost(address, size, readOnly);
  }

  @Override
  public void copyHostToDevice(long dstDevice, ByteBuffer src) {
    delegate.copyHostToDevice(dstDevice, src);
  }

  @Override
  public void copyDeviceToHost(ByteBuffer dst, long srcDevice) {
    delegate.copyDeviceToHost(dst, srcDevice);
  }

  @Override
  public void copyDeviceToDevice(long dstDevice, long srcDevice, long bytes) {
    delegate.copyDeviceToDevice(dstDevice, srcDevice, bytes);
  }

  @Override
  public void memsetD8(long dstDevice, byte value, long bytes) {
    delegate.memsetD8(dstDevice, value, bytes);
  }

  @Override
  public void memsetD32(long dstDevice, int value, long count) {
    delegate.memsetD32(dstDevice, value, count);
  }

  @Override
  public GpuStream createStream() {
    return delegate.createStream();
  }

  @Override
  public GpuEvent createEvent(boolean timing) {
    return delegate.createEvent(timing);
  }

  @Override
  public void close() {
    // Not ours to close.
  }
}
