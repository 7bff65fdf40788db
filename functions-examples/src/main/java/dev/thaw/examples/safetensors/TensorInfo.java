package dev.thaw.examples.safetensors;

import java.util.List;

/**
 * One tensor of a safetensors file, as its header describes it.
 *
 * @param name the tensor's name
 * @param dtype its element type
 * @param shape its dimensions, outermost first; empty for a scalar
 * @param begin first byte, relative to the start of the data section
 * @param end one past the last byte, relative to the start of the data section
 */
public record TensorInfo(String name, DType dtype, List<Long> shape, long begin, long end) {

  public TensorInfo {
    shape = List.copyOf(shape);
  }

  /** Elements: the product of the dimensions (1 for a scalar). */
  public long elements() {
    long n = 1;
    for (long d : shape) {
      n = Math.multiplyExact(n, d);
    }
    return n;
  }

  /** Bytes of data: {@code end - begin}, which a valid file makes equal to elements × dtype width. */
  public long byteSize() {
    return end - begin;
  }

  /** Whether its dimensions are {@code dims}, outermost first. */
  public boolean hasShape(long[] dims) {
    if (dims.length != shape.size()) {
      return false;
    }
    for (int i = 0; i < dims.length; i++) {
      if (shape.get(i) != dims[i]) {
        return false;
      }
    }
    return true;
  }

  /** The shape as an int array, for shapes known to fit. */
  public long[] dims() {
    return shape.stream().mapToLong(Long::longValue).toArray();
  }
}
