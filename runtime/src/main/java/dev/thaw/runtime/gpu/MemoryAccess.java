package dev.thaw.runtime.gpu;

/** Access a device has to mapped memory, with the {@code CUmemAccess_flags} value of each. */
public enum MemoryAccess {
  /** Loads only; a store faults like an illegal address. */
  READ(0x1),
  READ_WRITE(0x3);

  private final int cudaFlags;

  MemoryAccess(int cudaFlags) {
    this.cudaFlags = cudaFlags;
  }

  /** The {@code CU_MEM_ACCESS_FLAGS_PROT_*} value. */
  public int cudaFlags() {
    return cudaFlags;
  }
}
