package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Simulated physical device memory: a zeroed block of host memory, counted against its device's memory.
 * Exportable memory is a shared file ({@code memfd}) mapped here, so its descriptor carries the same bytes to
 * another process, as CUDA's POSIX handle does; its name carries the device it belongs to
 * ({@link #MEMFD_PREFIX}{@code <ordinal>}), which an importer reads back. Imported memory maps such a descriptor and
 * counts nothing (the exporter's device pays for it).
 * It is freed when its handle is closed and no mapping is left; mappings release it under the memory write
 * lock, so nothing reading it is running.
 */
final class SimPhysicalMemory implements PhysicalMemory {

  static final String MEMFD_PREFIX = "thaw-sim-device-memory-";

  private final SimContext context;
  private final int deviceOrdinal;
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
    this(context, context.device().ordinal(), size, hostAddress, null, size);
  }

  SimPhysicalMemory(SimContext context, int deviceOrdinal, long size, long hostAddress, SharedMemory shared,
      long counted) {
    this.context = context;
    this.deviceOrdinal = deviceOrdinal;
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

  @Override
  public int deviceOrdinal() {
    return deviceOrdinal;
  }

  /**
   * The device whose exported memory {@code fd} is, from the memfd's name ({@code /proc/self/fd/<fd>} reads
   * {@code /memfd:thaw-sim-device-memory-<ordinal> (deleted)}), or {@code fallback} when the name does not say.
   */
  static int exporterDevice(int fd, int fallback) {
    try {
      String target = Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
      int at = target.indexOf(MEMFD_PREFIX);
      if (at < 0) {
        return fallback;
      }
      int from = at + MEMFD_PREFIX.length();
      int to = from;
      while (to < target.length() && Character.isDigit(target.charAt(to))) {
        to++;
      }
      return to > from ? Integer.parseInt(target.substring(from, to)) : fallback;
    } catch (IOException | RuntimeException e) {
      return fallback;
    }
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
      context.driver().free(deviceOrdinal, hostAddress, size);
    } else {
      shared.close();
      context.driver().uncount(deviceOrdinal, counted);
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
