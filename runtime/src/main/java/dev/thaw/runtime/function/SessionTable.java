package dev.thaw.runtime.function;

import java.util.List;

/** What a session allocated and loaded, in order: with the device memory behind it, enough to rebuild it. */
public record SessionTable(List<AllocationRecord> allocations, List<ModuleRecord> modules) {

  public SessionTable {
    allocations = List.copyOf(allocations);
    modules = List.copyOf(modules);
  }

  /** Device bytes the allocations hold (as asked for, not rounded). */
  public long allocatedBytes() {
    return allocations.stream().mapToLong(AllocationRecord::size).sum();
  }
}
