package dev.thaw.runtime.gpu;

/**
 * One kernel parameter: where it sits in the parameter buffer and what it holds.
 *
 * @param index position in the {@code .entry} list
 * @param name the PTX parameter name, or {@code param<index>} when unknown
 * @param offset byte offset in the parameter buffer
 * @param size size in bytes
 * @param type what Java values it takes
 */
public record KernelParam(int index, String name, int offset, int size, ParamType type) {

  public KernelParam {
    if (index < 0 || offset < 0 || size <= 0) {
      throw new IllegalArgumentException("bad parameter: index " + index + ", offset " + offset + ", size " + size);
    }
  }

  /** {@code name (INT64, 8 bytes at 16)}. */
  public String describe() {
    return name + " (" + type + ", " + size + " bytes at " + offset + ")";
  }
}
