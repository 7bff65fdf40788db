package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.concurrent.locks.Lock;

/** Physical memory mapped into a {@link SimVirtualRange}. */
final class SimMapping implements Mapping {

  private final SimVirtualRange range;
  private final SimPhysicalMemory memory;
  private final long address;
  private volatile MemoryAccess access;
  private volatile boolean closed;

  SimMapping(SimVirtualRange range, SimPhysicalMemory memory, long address) {
    this.range = range;
    this.memory = memory;
    this.address = address;
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
    if (access == null) {
      throw new IllegalArgumentException("access must not be null");
    }
    range.context().checkOpen();
    MemoryAccess before;
    synchronized (this) {
      if (closed) {
        throw new IllegalStateException("mapping is closed");
      }
      before = this.access;
      this.access = access;
    }
    if (before == MemoryAccess.READ_WRITE && access != MemoryAccess.READ_WRITE && range.context().workInFlight()) {
      // The GPU changes the mapping under the work in flight (see SimContext): here that work always faults.
      range.context().poison(dev.thaw.runtime.gpu.CudaError.exception("cuMemSetAccess",
          dev.thaw.runtime.gpu.CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, String.format("mapping at 0x%x made %s while "
              + "work of its context was queued or running", address, access)));
    }
    range.space().republish();
  }

  @Override
  public MemoryAccess access() {
    return access;
  }

  synchronized SimAddressSpace.Segment segment() {
    return new SimAddressSpace.Segment(address, address + memory.size(), memory.hostAddress(), access);
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
  public String toString() {
    return String.format("SimMapping[0x%x, %d bytes, %s]", address, memory.size(), access);
  }
}
