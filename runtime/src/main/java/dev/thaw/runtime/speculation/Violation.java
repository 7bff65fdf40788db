package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.KernelRef;

/**
 * One access a launch made outside its speculated set.
 *
 * @param kernel the kernel
 * @param launch the launch's sequence number in its validator, from 0
 * @param access {@link AccessKind#READ} or {@link AccessKind#WRITE}
 * @param address the first byte of the offending range
 * @param bytes its length (a recorded range clipped to one allocation, or to a gap between allocations)
 * @param allocation the allocation it hit, or null where it hit none ({@link #target()} says "unmapped")
 * @param reason why it is a violation
 */
public record Violation(KernelRef kernel, long launch, AccessKind access, long address, long bytes,
    String allocation, Reason reason) {

  public enum Reason {
    /** The access hit no live allocation. */
    UNMAPPED,
    /** The access hit an allocation that is not in the speculated set. */
    NOT_SPECULATED,
    /** A write to a buffer speculated read-only, or a read of one speculated write-only. */
    WRONG_KIND,
    /**
     * One access spanning two allocations, each speculated with the right kind (a GPU guard allows an access only
     * when one range holds all of it); {@code allocation} is the first.
     */
    SPANS_ALLOCATIONS
  }

  /** The allocation's name, or {@code unmapped}. */
  public String target() {
    return allocation == null ? "unmapped" : allocation;
  }

  @Override
  public String toString() {
    String why = switch (reason) {
      case UNMAPPED -> "outside every allocation";
      case NOT_SPECULATED -> "'" + allocation + "' is not in the speculated set";
      case WRONG_KIND -> "'" + allocation + "' is speculated " + (access == AccessKind.WRITE ? "read" : "write")
          + "-only";
      case SPANS_ALLOCATIONS -> "one access runs from '" + allocation + "' into the next allocation";
    };
    return String.format("%s launch %d: %s of %d bytes at 0x%x: %s", kernel, launch, access, bytes, address, why);
  }
}
