package dev.thaw.runtime.function;

import java.util.List;
import java.util.regex.Pattern;

/**
 * One tensor of a function's requests or responses, as the KServe Open Inference Protocol (v2) describes
 * tensors: the tensor travels in the function's JSON as the field {@code name}, a nested array of
 * {@code shape} (row-major), its elements of {@code datatype}.
 *
 * @param name the JSON field that carries it
 * @param datatype a v2 datatype: {@code FP32}, {@code FP16}, {@code INT32}, {@code INT64}, {@code BOOL}, ...
 * @param shape its dimensions; {@code -1} for a dimension that varies from request to request
 */
public record TensorSpec(String name, String datatype, List<Long> shape) {

  private static final Pattern DATATYPE = Pattern.compile("BOOL|U?INT(8|16|32|64)|FP(16|32|64)|BF16|BYTES");

  public TensorSpec {
    FunctionSession.checkName(name, "tensor");
    if (datatype == null || !DATATYPE.matcher(datatype).matches()) {
      throw new IllegalArgumentException("'" + datatype + "' is not a v2 tensor datatype");
    }
    shape = List.copyOf(shape);
    for (long d : shape) {
      if (d < -1 || d == 0) {
        throw new IllegalArgumentException("tensor '" + name + "': a dimension is positive or -1, not " + d);
      }
    }
  }

  public static TensorSpec of(String name, String datatype, long... shape) {
    Long[] dims = new Long[shape.length];
    for (int i = 0; i < shape.length; i++) {
      dims[i] = shape[i];
    }
    return new TensorSpec(name, datatype, List.of(dims));
  }
}
