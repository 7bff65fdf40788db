package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.concurrent.locks.Lock;

/**
 * Physical memory mapped into a {@link SimVirtualRange}, with the access each device was granted. A device other than
 * the memory's own is granted access only where the driver says the two are peers ({@link SimOptions#peerAccess()}).
 */
final class SimMapping implements Mapping {

  private final SimVirtualRange range;
  private final SimPhysicalMemory memory;
  private final long address;
  /** By device ordinal; guarded by {@code this}. */
  private final MemoryAccess[] granted;
  private boolean closed;

  SimMapping(SimVirtualRange range, SimPhysicalMemory memory, long address) {
    this.range = range;
    this.memory = memory;
    this.address = address;
    this.granted = new MemoryAccess[range.context().driver().devices().size()];
  }

  @Override
  public long address() {
    return address;
  }

  @Override
  public long size() {
    return memory.size();
  }

  @Override
  public void setAccess(MemoryAccess access) {
    grant(range.context().device().ordinal(), access);
  }

  @Override
  public void setAccessFor(int deviceOrdinal, MemoryAccess access) {
    if (deviceOrdinal < 0 || deviceOrdinal >= granted.length) {
      throw new IllegalArgumentException("no device " + deviceOrdinal + "; the simulated devices are 0 to "
          + (granted.length - 1));
    }
    grant(deviceOrdinal, access);
  }

  private void grant(int device, MemoryAccess access) {
    if (access == null) {
      throw new IllegalArgumentException("access must not be null");
    }
    SimContext context = range.context();
    context.checkOpen();
    if (device != memory.deviceOrdinal() && !context.driver().canAccessPeer(device, memory.deviceOrdinal())) {
      throw CudaError.exception("cuMemSetAccess", CudaError.CUDA_ERROR_INVALID_DEVICE, String.format(
          "device %d cannot reach memory of device %d (the simulated devices are not peers)", device,
          memory.deviceOrdinal()));
    }
    MemoryAccess before;
    synchronized (this) {
      if (closed) {
        throw new IllegalStateException("mapping is closed");
      }
      before = granted[device];
      granted[device] = access;
    }
    if (before == MemoryAccess.READ_WRITE && access != MemoryAccess.READ_WRITE && context.workInFlight()) {
      // The GPU changes the mapping under the work in flight (see SimContext): here that work always faults.
      context.poison(CudaError.exception("cuMemSetAccess", CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, String.format(
          "mapping at 0x%x made %s while work of its context was queued or running", address, access)));
    }
    range.space().republish();
  }

  @Override
  public synchronized MemoryAccess access() {
    return granted[range.context().device().ordinal()];
  }

  @Override
  public synchronized MemoryAccess accessFor(int deviceOrdinal) {
    return deviceOrdinal >= 0 && deviceOrdinal < granted.length ? granted[deviceOrdinal] : null;
  }

  synchronized SimAddressSpace.Segment segment(int device) {
    return new SimAddressSpace.Segment(address, address + memory.size(), memory.hostAddress(), memory.deviceOrdinal(),
        granted[device]);
  }

  @Override
  public void close() {
    Lock write = range.space().writeLock();
    // Waits for running kernels and copies: they may hold addresses inside this mapping.
    write.lock();
    try {
      synchronized (this) {
        if (closed) {
          return;
        }
        closed = true;
      }
      range.removeMapping(this);
      range.space().republish();
      memory.releaseMapping();
    } finally {
      write.unlock();
    }
  }

  @Override
  public synchronized String toString() {
    return String.format("SimMapping[0x%x, %d bytes, %s]", address, memory.size(),
        granted[range.context().device().ordinal()]);
  }
}
