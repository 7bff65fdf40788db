package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import java.util.ArrayList;
import java.util.List;

/**
 * A device address range: a piece of the process's {@link DeviceAddressArena}, or (outside it) its own
 * {@code cuMemAddressReserve}. Invariant: {@link #mappings} holds exactly the
 * live mappings made through this range, and they do not overlap.
 */
final class CudaVirtualRange extends CudaResource implements VirtualRange {

  private final long address;
  private final long size;
  private final List<CudaMapping> mappings = new ArrayList<>();
  /** The arena the addresses came from, or null when the driver reserved them for this range alone. */
  private final DeviceAddressArena arena;

  CudaVirtualRange(CudaContext context, long address, long size, DeviceAddressArena arena) {
    super(context, String.format("CUDA virtual range [0x%x, 0x%x)", address, address + size));
    this.address = address;
    this.size = size;
    this.arena = arena;
  }

  @Override
  public long address() {
    return address;
  }

  @Override
  public long size() {
    return size;
  }

  @Override
  public Mapping map(long offset, PhysicalMemory memory) {
    checkOpen();
    CudaPhysicalMemory physical = context.own(memory, CudaPhysicalMemory.class, "physical memory");
    long g = context.granularity();
    if (offset < 0 || (offset & (g - 1)) != 0) {
      throw new IllegalArgumentException(String.format("offset 0x%x is not a non-negative multiple of the "
          + "granularity 0x%x", offset, g));
    }
    if (offset > size || physical.size() > size - offset) {
      throw new IllegalArgumentException(String.format("%d bytes at offset 0x%x do not fit in %s",
          physical.size(), offset, describe()));
    }
    long at = address + offset;
    synchronized (mappings) {
      for (CudaMapping m : mappings) {
        if (at < m.address() + m.size() && m.address() < at + physical.size()) {
          throw new IllegalArgumentException(String.format("[0x%x, 0x%x) overlaps %s", at,
              at + physical.size(), m.describe()));
        }
      }
      context.ensureCurrent();
      check(CudaNative.cuMemMap(at, physical.size(), 0L, physical.handle, 0L), "cuMemMap");
      CudaMapping mapping = new CudaMapping(this, at, physical.size());
      mappings.add(mapping);
      return mapping;
    }
  }

  void forget(CudaMapping mapping) {
    synchronized (mappings) {
      mappings.remove(mapping);
    }
  }

  @Override
  String describe() {
    return String.format("CUDA virtual range [0x%x, 0x%x)", address, address + size);
  }

  @Override
  int rank() {
    return RANK_RANGE;
  }

  /** Unmaps what is still mapped, then frees the addresses; tries both even if one fails. */
  @Override
  void free() {
    List<CudaMapping> live;
    synchronized (mappings) {
      live = new ArrayList<>(mappings);
    }
    RuntimeException failure = null;
    for (CudaMapping m : live) {
      try {
        m.close();
      } catch (RuntimeException e) {
        failure = failure == null ? e : failure;
      }
    }
    if (arena != null) {
      arena.release(address, size);
    } else {
      int r = CudaNative.cuMemAddressFree(address, size);
      if (r != CudaNative.CUDA_SUCCESS && failure == null) {
        failure = CudaNative.error("cuMemAddressFree", r);
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}
