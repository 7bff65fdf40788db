package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.VirtualRange;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/** A reserved range of the simulated address space. */
final class SimVirtualRange implements VirtualRange {

  private final SimContext context;
  private final SimAddressSpace space;
  private final long address;
  private final long size;
  /** By offset; guarded by {@code this}. */
  private final TreeMap<Long, SimMapping> mappings = new TreeMap<>();
  private boolean closed;

  SimVirtualRange(SimContext context, SimAddressSpace space, long address, long size) {
    this.context = context;
    this.space = space;
    this.address = address;
    this.size = size;
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
    if (!(memory instanceof SimPhysicalMemory phys) || phys.driver() != context.driver()) {
      throw new IllegalArgumentException("not physical memory of this simulated device: " + memory);
    }
    context.checkOpen();
    if (offset < 0 || offset % SimAddressSpace.GRANULARITY != 0) {
      throw new IllegalArgumentException("offset " + offset + " is not a non-negative multiple of the granularity ("
          + SimAddressSpace.GRANULARITY + ")");
    }
    if (phys.size() > size - offset) {
      throw new IllegalArgumentException(phys.size() + " bytes at offset " + offset + " do not fit in a range of "
          + size);
    }
    SimMapping mapping;
    synchronized (this) {
      if (closed) {
        throw new IllegalStateException("virtual range is closed");
      }
      Map.Entry<Long, SimMapping> below = mappings.lowerEntry(offset + phys.size());
      if (below != null && below.getKey() + below.getValue().size() > offset) {
        throw CudaError.exception("cuMemMap", CudaError.CUDA_ERROR_INVALID_VALUE, String.format(
            "[0x%x, 0x%x) overlaps the mapping at 0x%x", address + offset, address + offset + phys.size(),
            address + below.getKey()));
      }
      phys.retainMapping();
      mapping = new SimMapping(this, phys, address + offset);
      mappings.put(offset, mapping);
    }
    space.republish();
    return mapping;
  }

  /** Called by a mapping that is being unmapped, under the memory write lock. */
  synchronized void removeMapping(SimMapping mapping) {
    mappings.remove(mapping.address() - address, mapping);
  }

  synchronized void addSegments(List<SimAddressSpace.Segment> out, int device) {
    for (SimMapping m : mappings.values()) {
      out.add(m.segment(device));
    }
  }

  SimAddressSpace space() {
    return space;
  }

  SimContext context() {
    return context;
  }

  String describe() {
    return String.format("[0x%x, 0x%x)", address, address + size);
  }

  @Override
  public void close() {
    List<SimMapping> left;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      left = new ArrayList<>(mappings.values());
    }
    for (SimMapping m : left) {
      m.close();
    }
    space.release(this);
    context.forget(this);
  }

  @Override
  public String toString() {
    return "SimVirtualRange" + describe();
  }
}
