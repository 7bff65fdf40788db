package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.io.IOException;

/**
 * Simulated physical device memory: a zeroed block of host memory, counted against the device's memory.
 * Exportable memory is a shared file ({@code memfd}) mapped here, so its descriptor carries the same bytes to
 * another process, as CUDA's POSIX handle does; imported memory maps such a descriptor and counts nothing
 * (the exporter's device pays for it).
 * It is freed when its handle is closed and no mapping is left; mappings release it under the memory write
 * lock, so nothing reading it is running.
 */
final class SimPhysicalMemory implements PhysicalMemory {

  private final SimContext context;
  private final long size;
  private final long hostAddress;
  /** The shared file behind exportable or imported memory; null for plain memory. */
  private final SharedMemory shared;
  /** Bytes counted against the device, returned when freed: 0 for imported memory. */
  private final long counted;
  private boolean handleOpen = true;
  private int mappings;
  private boolean freed;

  SimPhysicalMemory(SimContext context, long size, long hostAddress) {
    this(context, size, hostAddress, null, size);
  }

  SimPhysicalMemory(SimContext context, long size, long hostAddress, SharedMemory shared, long counted) {
    this.context = context;
    this.size = size;
    this.hostAddress = hostAddress;
    this.shared = shared;
    this.counted = counted;
  }

  @Override
  public boolean isExportable() {
    return shared != null;
  }

  @Override
  public int exportPosixFd() {
    if (shared == null) {
      throw new IllegalStateException("simulated physical memory not created exportable cannot be exported");
    }
    synchronized (this) {
      if (!handleOpen) {
        throw new IllegalStateException("physical memory is closed");
      }
    }
    try {
      return ProcessFds.dup(shared.fd());
    } catch (IOException e) {
      throw CudaError.exception("cuMemExportToShareableHandle", CudaError.CUDA_ERROR_INVALID_VALUE, e.getMessage());
    }
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
      release();
    }
  }

  private void release() {
    if (shared == null) {
      context.driver().free(hostAddress, size);
    } else {
      shared.close();
      context.driver().uncount(counted);
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
      release();
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
