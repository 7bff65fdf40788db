package dev.thaw.examples.transformer;

import java.util.Arrays;

/**
 * A weight tensor of a GPT-2 or Llama checkpoint: its place in its model's upload order, its Hugging Face name and
 * its shape; each model's record adds how seeded weights fill it. Equality is each record's own (index, name, shape
 * and fill).
 */
public interface WeightTensor {

  int index();

  String name();

  long[] shape();

  default long elements() {
    long n = 1;
    for (long d : shape()) {
      n *= d;
    }
    return n;
  }

  default String shapeString() {
    return Arrays.toString(shape());
  }

  /** The hash both records use: name and shape. */
  static int hash(WeightTensor t) {
    return t.name().hashCode() * 31 + Arrays.hashCode(t.shape());
  }
}
