package dev.thaw.runtime.ptx.instrument;

/**
 * What an access does, as a bit mask of the rights it needs: a range allows an access when its kind mask
 * holds all of the access's bits. An atomic or a reduction reads and writes.
 */
public enum AccessOp {
  READ(1),
  WRITE(2),
  ATOMIC(3);

  private final int mask;

  AccessOp(int mask) {
    this.mask = mask;
  }

  /** The bits this access needs; also its code in a violation record. */
  public int mask() {
    return mask;
  }

  /** @throws IllegalArgumentException for a code no instrumented kernel writes */
  public static AccessOp ofCode(int code) {
    for (AccessOp k : values()) {
      if (k.mask == code) {
        return k;
      }
    }
    throw new IllegalArgumentException("no access kind has code " + code);
  }
}
