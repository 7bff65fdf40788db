package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.PhysicalMemory;

/**
 * Simulated physical device memory: a zeroed block of host memory, counted against the device's memory.
 * It is freed when its handle is closed and no mapping is left; mappings release it under the memory write
 * lock, so nothing reading it is running.
 */
final class SimPhysicalMemory implements PhysicalMemory {

  private final SimContext context;
  private final long size;
  private final long hostAddress;
  private boolean handleOpen = true;
  private int mappings;
  private boolean freed;

  SimPhysicalMemory(SimContext context, long size, long hostAddress) {
    this.context = context;
    this.size = size;
    this.hostAddress = hostAddress;
  }

  @Override
  public long size() {
    return size;
  }

  long hostAddress() {
    return hostAddress;
  }

  SimDriver driver() {
    return context.driver();
  }

  synchronized void retainMapping() {
    if (!handleOpen) {
      throw new IllegalStateException("physical memory is closed");
    }
    mappings++;
  }

  void releaseMapping() {
    boolean free;
    synchronized (this) {
      mappings--;
      free = maybeFree();
    }
    if (free) {
      context.driver().free(hostAddress, size);
    }
  }

  @Override
  public void close() {
    boolean free;
    synchronized (this) {
      if (!handleOpen) {
        return;
      }
      handleOpen = false;
      free = maybeFree();
    }
    if (free) {
      context.driver().free(hostAddress, size);
    }
    context.forget(this);
  }

  private boolean maybeFree() {
    if (!handleOpen && mappings == 0 && !freed) {
      freed = true;
      return true;
    }
    return false;
  }

  @Override
  public String toString() {
    return "SimPhysicalMemory[" + size + " bytes]";
  }
}
