package dev.thaw.examples.collective;

import dev.thaw.examples.llama.kernels.HalfType;

/**
 * The element type of the partials an all-reduce sums: fp32, or a 16-bit type that halves what crosses the links
 * at the cost of one rounding of each rank's partial. The sum is fp32 either way.
 */
public enum PartialType {
  FLOAT32(0, 4),
  BFLOAT16(1, 2),
  FLOAT16(2, 2);

  private final int code;
  private final int bytes;

  PartialType(int code, int bytes) {
    this.code = code;
    this.bytes = bytes;
  }

  /** The kernels' {@code dtype} argument. */
  public int code() {
    return code;
  }

  /** Bytes per element. */
  public int bytes() {
    return bytes;
  }

  /** The 16-bit type a model holds its activations in. */
  public static PartialType of(HalfType type) {
    return type == HalfType.BF16 ? BFLOAT16 : FLOAT16;
  }

  /** By the kernels' code. */
  public static PartialType ofCode(int code) {
    for (PartialType t : values()) {
      if (t.code == code) {
        return t;
      }
    }
    throw new IllegalArgumentException("no partial type " + code);
  }
}
