package dev.thaw.runtime.speculation;

/** How a kernel may touch a buffer. */
public enum AccessKind {
  READ(1),
  WRITE(2),
  READ_WRITE(3);

  /** Bit 1 reads, bit 2 writes; the analysis merges kinds by or-ing them. */
  final int bits;

  AccessKind(int bits) {
    this.bits = bits;
  }

  public boolean reads() {
    return (bits & 1) != 0;
  }

  public boolean writes() {
    return (bits & 2) != 0;
  }

  /** The kind of bits 1 (read), 2 (write), 3; null for 0. */
  static AccessKind ofBits(int bits) {
    return switch (bits & 3) {
      case 1 -> READ;
      case 2 -> WRITE;
      case 3 -> READ_WRITE;
      default -> null;
    };
  }
}
