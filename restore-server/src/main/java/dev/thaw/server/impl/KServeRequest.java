package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.server.ServeException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A KServe v2 inference request read against the function's signature: the function's JSON request (each input
 * tensor, from JSON {@code data} or from the binary tensor data after the JSON, nested as its shape says; the
 * request's {@code parameters} beside them) and the outputs to send back, each as JSON or as binary data.
 *
 * @param id the request's {@code id}, echoed in the response; null when none
 * @param function the function's JSON request
 * @param outputs the outputs asked for, in the order asked; every declared output when the request names none
 * @param explicit true when the request named its outputs (a named output the function did not return is its fault)
 */
record KServeRequest(String id, ObjectNode function, List<Output> outputs, boolean explicit) {

  /** Elements one tensor may hold; the body limit bounds it too. */
  static final long MAX_ELEMENTS = 1L << 26;
  static final String BINARY_DATA_SIZE = "binary_data_size";
  static final String BINARY_DATA = "binary_data";
  static final String BINARY_DATA_OUTPUT = "binary_data_output";
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  /** One output to send: its declared tensor, and whether as binary data after the JSON. */
  record Output(TensorSpec spec, boolean binary) {}

  /**
   * Reads a request: {@code header} is the JSON object, {@code binary} the bytes after it (binary tensor data
   * extension), or null when the body was JSON alone.
   *
   * @throws ServeException 400 naming what does not match the signature or the protocol
   */
  static KServeRequest read(JsonNode header, ByteBuffer binary, FunctionSignature sig) {
    if (!header.isObject()) {
      throw ServeException.badRequest("an inference request is a JSON object with 'inputs'");
    }
    ObjectNode function = NODES.objectNode();
    JsonNode params = header.get("parameters");
    boolean binaryOutputs = false;
    if (params != null && !params.isNull()) {
      if (!params.isObject()) {
        throw ServeException.badRequest("'parameters' is an object");
      }
      function.setAll((ObjectNode) params.deepCopy());
      JsonNode all = function.remove(BINARY_DATA_OUTPUT);
      binaryOutputs = flag(all, "parameters." + BINARY_DATA_OUTPUT);
    }
    JsonNode inputs = header.get("inputs");
    if (inputs == null || !inputs.isArray() || inputs.isEmpty()) {
      throw ServeException.badRequest("'inputs' is a non-empty array of tensors");
    }
    Map<String, TensorSpec> declared = new HashMap<>();
    sig.inputs().forEach(t -> declared.put(t.name(), t));
    ByteBuffer rest = binary == null ? null : binary.duplicate();
    for (JsonNode in : inputs) {
      String tensor = in.path("name").isTextual() ? in.get("name").textValue() : null;
      TensorSpec spec = tensor == null ? null : declared.remove(tensor);
      if (spec == null) {
        throw ServeException.badRequest(tensor == null ? "every input needs a 'name'"
            : "no input tensor '" + tensor + "' (or given twice); the model takes " + names(sig.inputs()));
      }
      if (function.has(tensor)) {
        throw ServeException.badRequest("input '" + tensor + "' has the name of a request parameter; rename the "
            + "parameter");
      }
      String datatype = in.path("datatype").asText("");
      if (!datatype.equals(spec.datatype())) {
        throw ServeException.badRequest("input '" + tensor + "' is " + spec.datatype() + ", not '" + datatype + "'");
      }
      List<Long> shape = shape(in.get("shape"), spec);
      long elements = elements(shape, tensor);
      List<JsonNode> flat;
      long size = binarySize(in, tensor);
      if (size >= 0) {
        if (in.has("data")) {
          throw ServeException.badRequest("input '" + tensor + "' has both 'data' and '" + BINARY_DATA_SIZE + "'");
        }
        if (rest == null) {
          throw ServeException.badRequest("input '" + tensor + "' has '" + BINARY_DATA_SIZE + "' but the request "
              + "has no binary data: send the JSON, then the tensors' bytes, with Inference-Header-Content-Length");
        }
        if (size > rest.remaining()) {
          throw ServeException.badRequest("input '" + tensor + "' has " + size + " bytes of binary data; only "
              + rest.remaining() + " are left after the inputs before it");
        }
        flat = decode(rest.slice(rest.position(), (int) size), spec.datatype(), elements, tensor);
        rest.position(rest.position() + (int) size);
      } else {
        flat = new ArrayList<>();
        flatten(in.get("data"), flat, tensor);
        if (flat.size() != elements) {
          throw ServeException.badRequest("input '" + tensor + "' of shape " + shape + " needs " + elements
              + " elements in 'data', not " + flat.size());
        }
        for (JsonNode v : flat) {
          if (!TensorData.holds(spec.datatype(), v)) {
            throw ServeException.badRequest("input '" + tensor + "' is " + spec.datatype() + "; " + v
                + " is not one");
          }
        }
      }
      function.set(tensor, nest(flat, shape));
    }
    if (!declared.isEmpty()) {
      throw ServeException.badRequest("missing input tensors " + declared.keySet());
    }
    if (rest != null && rest.hasRemaining()) {
      throw ServeException.badRequest(rest.remaining() + " bytes of binary data follow the inputs' "
          + BINARY_DATA_SIZE + "s");
    }
    List<Output> outputs = outputs(header.get("outputs"), sig, binaryOutputs);
    String id = header.hasNonNull("id") ? header.get("id").asText() : null;
    return new KServeRequest(id, function, outputs == null ? all(sig, binaryOutputs) : outputs, outputs != null);
  }

  /**
   * Reads a request that is the tensor's bytes alone ({@code Inference-Header-Content-Length: 0}): the function takes
   * one input, whose shape has at most one varying dimension, found from the bytes; every output comes back binary.
   */
  static KServeRequest raw(ByteBuffer body, FunctionSignature sig) {
    if (sig.inputs().size() != 1) {
      throw ServeException.badRequest("a request without a JSON header (Inference-Header-Content-Length: 0) is for "
          + "a model of one input; this one takes " + names(sig.inputs()));
    }
    TensorSpec spec = sig.inputs().get(0);
    long fixed = 1;
    int varying = -1;
    for (int i = 0; i < spec.shape().size(); i++) {
      long d = spec.shape().get(i);
      if (d == -1) {
        if (varying >= 0) {
          throw ServeException.badRequest("input '" + spec.name() + "' of shape " + spec.shape() + " has more than "
              + "one varying dimension: send a JSON header that gives its shape");
        }
        varying = i;
      } else {
        fixed *= d;
      }
    }
    int size = TensorData.elementBytes(spec.datatype());
    long elements;
    try {
      elements = size > 0 ? body.remaining() / size : TensorData.countBytesElements(body);
    } catch (IllegalArgumentException e) {
      throw ServeException.badRequest("input '" + spec.name() + "': " + e.getMessage());
    }
    if (size > 0 && body.remaining() % size != 0 || (varying < 0 ? elements != fixed : elements % fixed != 0)) {
      throw ServeException.badRequest("input '" + spec.name() + "' of shape " + spec.shape() + " cannot be "
          + body.remaining() + " bytes of " + spec.datatype());
    }
    List<Long> shape = new ArrayList<>(spec.shape());
    if (varying >= 0) {
      shape.set(varying, elements / fixed);
    }
    elements(shape, spec.name());
    ObjectNode function = NODES.objectNode();
    function.set(spec.name(), nest(decode(body, spec.datatype(), elements, spec.name()), shape));
    return new KServeRequest(null, function, all(sig, true), false);
  }

  private static List<Output> all(FunctionSignature sig, boolean binary) {
    return sig.outputs().stream().map(t -> new Output(t, binary)).toList();
  }

  /** The outputs the request names, or null when it names none. */
  private static List<Output> outputs(JsonNode requested, FunctionSignature sig, boolean binaryByDefault) {
    if (requested == null || requested.isNull()) {
      return null;
    }
    if (!requested.isArray()) {
      throw ServeException.badRequest("'outputs' is an array of {\"name\": ...}");
    }
    if (requested.isEmpty()) {
      return null;
    }
    Map<String, TensorSpec> declared = new HashMap<>();
    sig.outputs().forEach(t -> declared.put(t.name(), t));
    Set<String> seen = new HashSet<>();
    List<Output> out = new ArrayList<>();
    for (JsonNode o : requested) {
      String name = o.path("name").isTextual() ? o.get("name").textValue() : null;
      if (name == null) {
        throw ServeException.badRequest("every requested output needs a 'name'");
      }
      TensorSpec spec = declared.get(name);
      if (spec == null) {
        throw ServeException.badRequest("no output tensor '" + name + "'; the model gives " + names(sig.outputs()));
      }
      if (!seen.add(name)) {
        throw ServeException.badRequest("output '" + name + "' is asked for twice");
      }
      JsonNode params = o.get("parameters");
      if (params != null && !params.isNull() && !params.isObject()) {
        throw ServeException.badRequest("output '" + name + "': 'parameters' is an object");
      }
      JsonNode binary = params == null ? null : params.get(BINARY_DATA);
      out.add(new Output(spec, binary == null || binary.isNull() ? binaryByDefault
          : flag(binary, "output '" + name + "': parameters." + BINARY_DATA)));
    }
    return out;
  }

  private static boolean flag(JsonNode v, String what) {
    if (v == null || v.isNull()) {
      return false;
    }
    if (!v.isBoolean()) {
      throw ServeException.badRequest(what + " is true or false, not " + v);
    }
    return v.booleanValue();
  }

  /** The input's {@code binary_data_size}, or -1 when it has none. */
  private static long binarySize(JsonNode in, String tensor) {
    JsonNode params = in.get("parameters");
    if (params == null || params.isNull()) {
      return -1;
    }
    if (!params.isObject()) {
      throw ServeException.badRequest("input '" + tensor + "': 'parameters' is an object");
    }
    JsonNode size = params.get(BINARY_DATA_SIZE);
    if (size == null || size.isNull()) {
      return -1;
    }
    if (!size.isIntegralNumber() || !size.canConvertToInt() || size.intValue() < 0) {
      throw ServeException.badRequest("input '" + tensor + "': " + BINARY_DATA_SIZE + " is a byte count, not "
          + size);
    }
    return size.intValue();
  }

  private static List<JsonNode> decode(ByteBuffer bytes, String datatype, long elements, String tensor) {
    try {
      return TensorData.decode(bytes, datatype, elements);
    } catch (IllegalArgumentException e) {
      throw ServeException.badRequest("input '" + tensor + "' binary data: " + e.getMessage());
    }
  }

  /** The request's shape of a tensor: sizes of 0 or more, as many as declared, each the declared one unless -1. */
  private static List<Long> shape(JsonNode s, TensorSpec spec) {
    String tensor = spec.name();
    if (s == null || !s.isArray()) {
      throw ServeException.badRequest("input '" + tensor + "' needs a 'shape', an array of sizes");
    }
    List<Long> shape = new ArrayList<>();
    for (JsonNode d : s) {
      if (!d.isIntegralNumber() || !d.canConvertToLong() || d.longValue() < 0) {
        throw ServeException.badRequest("input '" + tensor + "': every size of 'shape' is an integer, 0 or more");
      }
      shape.add(d.longValue());
    }
    if (shape.size() != spec.shape().size()) {
      throw ServeException.badRequest("input '" + tensor + "' has " + spec.shape().size() + " dimensions "
          + spec.shape() + ", not " + shape.size());
    }
    for (int i = 0; i < shape.size(); i++) {
      long want = spec.shape().get(i);
      if (want != -1 && want != shape.get(i)) {
        throw ServeException.badRequest("input '" + tensor + "': dimension " + i + " is " + want + ", not "
            + shape.get(i));
      }
    }
    return shape;
  }

  /**
   * The tensor's element count. Sizes of 0 count as 1 against {@link #MAX_ELEMENTS}: a tensor of no elements still
   * becomes nested arrays (shape [n, 0] is n empty arrays).
   */
  private static long elements(List<Long> shape, String tensor) {
    long elements = 1;
    long arrays = 1;
    for (long d : shape) {
      arrays *= Math.max(d, 1);
      if (arrays > MAX_ELEMENTS) {
        throw ServeException.badRequest("input '" + tensor + "' of shape " + shape + " is too large");
      }
      elements *= d;
    }
    return elements;
  }

  /** Adds the elements of {@code data}, flat or nested, to {@code out}. */
  static void flatten(JsonNode data, List<JsonNode> out, String tensor) {
    if (data == null) {
      throw ServeException.badRequest("input '" + tensor + "' needs 'data' (or parameters." + BINARY_DATA_SIZE
          + " with binary data)");
    }
    if (data.isArray()) {
      for (JsonNode d : data) {
        flatten(d, out, tensor);
        if (out.size() > MAX_ELEMENTS) {
          throw ServeException.badRequest("input '" + tensor + "' is too large");
        }
      }
    } else {
      out.add(data);
    }
  }

  /** The flat row-major elements as nested arrays of {@code shape}; a size of 0 makes empty arrays. */
  private static JsonNode nest(List<JsonNode> flat, List<Long> shape) {
    int[] at = {0};
    return nest(flat, shape, 0, at);
  }

  private static JsonNode nest(List<JsonNode> flat, List<Long> shape, int dim, int[] at) {
    if (dim == shape.size()) {
      return flat.get(at[0]++);
    }
    ArrayNode a = NODES.arrayNode();
    for (long i = 0; i < shape.get(dim); i++) {
      a.add(nest(flat, shape, dim + 1, at));
    }
    return a;
  }

  static List<String> names(List<TensorSpec> specs) {
    return specs.stream().map(TensorSpec::name).toList();
  }
}
