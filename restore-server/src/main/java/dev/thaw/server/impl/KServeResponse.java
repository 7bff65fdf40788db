package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.server.ServeException;
import io.vertx.core.buffer.Buffer;
import io.vertx.ext.web.RoutingContext;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A KServe v2 inference response made from the function's JSON response: each output asked for, with the shape its
 * nesting has (a declared dimension under an empty array keeps its declared size, or 0), its elements flat in
 * {@code data} or, when asked for as binary data, as bytes after the JSON. A response that does not match the
 * function's declared outputs (ragged, of another rank or size, elements not of the datatype) is the function's fault:
 * 500 {@code bad_function_output}.
 *
 * @param json the JSON object
 * @param binary the binary outputs' bytes, in the order of the JSON's outputs; empty when every output is JSON
 */
record KServeResponse(ObjectNode json, List<byte[]> binary) {

  static final String HEADER_LENGTH = "Inference-Header-Content-Length";

  static KServeResponse of(String model, String version, KServeRequest request, JsonNode response) {
    ObjectNode json = Http.object();
    json.put("model_name", model);
    json.put("model_version", version);
    if (request.id() != null) {
      json.put("id", request.id());
    }
    ArrayNode outputs = json.putArray("outputs");
    List<byte[]> binary = new ArrayList<>();
    for (KServeRequest.Output o : request.outputs()) {
      TensorSpec spec = o.spec();
      JsonNode value = response.get(spec.name());
      if (value == null || value.isNull()) {
        if (request.explicit()) {
          throw badOutput(spec, "the function returned none");
        }
        continue;
      }
      List<Long> shape = shape(value, spec);
      List<JsonNode> flat = new ArrayList<>();
      flatten(value, flat);
      for (int i = 0; i < flat.size(); i++) {
        if (!TensorData.holds(spec.datatype(), flat.get(i))) {
          throw badOutput(spec, "element " + i + " (" + flat.get(i) + ") is not " + spec.datatype());
        }
      }
      ObjectNode t = outputs.addObject();
      t.put("name", spec.name());
      t.put("datatype", spec.datatype());
      ArrayNode s = t.putArray("shape");
      shape.forEach(s::add);
      if (o.binary()) {
        byte[] bytes = TensorData.encode(flat, spec.datatype());
        t.putObject("parameters").put(KServeRequest.BINARY_DATA_SIZE, bytes.length);
        binary.add(bytes);
      } else {
        t.putArray("data").addAll(flat);
      }
    }
    return new KServeResponse(json, binary);
  }

  /** The value's shape, checked against the declared one: rectangular, of its rank, fixed sizes as declared. */
  private static List<Long> shape(JsonNode value, TensorSpec spec) {
    List<Long> declared = spec.shape();
    List<Long> shape = new ArrayList<>();
    JsonNode n = value;
    for (int dim = 0; dim < declared.size(); dim++) {
      if (!n.isArray()) {
        throw badOutput(spec, "it has " + dim + " dimensions, not " + declared.size());
      }
      shape.add((long) n.size());
      if (n.isEmpty()) {
        for (int rest = dim + 1; rest < declared.size(); rest++) {
          shape.add(Math.max(declared.get(rest), 0));
        }
        break;
      }
      n = n.get(0);
    }
    for (int dim = 0; dim < declared.size(); dim++) {
      if (declared.get(dim) != -1 && !declared.get(dim).equals(shape.get(dim))) {
        throw badOutput(spec, "dimension " + dim + " is " + shape.get(dim) + ", not " + declared.get(dim));
      }
    }
    checkRectangular(value, shape, 0, spec);
    return shape;
  }

  private static void checkRectangular(JsonNode n, List<Long> shape, int dim, TensorSpec spec) {
    if (dim == shape.size()) {
      if (n.isContainerNode()) {
        throw badOutput(spec, "it nests deeper than its " + shape.size() + " dimensions");
      }
      return;
    }
    if (!n.isArray() || n.size() != shape.get(dim)) {
      throw badOutput(spec, "it is ragged: not every array at depth " + dim + " holds " + shape.get(dim));
    }
    for (JsonNode child : n) {
      checkRectangular(child, shape, dim + 1, spec);
    }
  }

  private static void flatten(JsonNode n, List<JsonNode> out) {
    if (n.isArray()) {
      n.forEach(child -> flatten(child, out));
    } else {
      out.add(n);
    }
  }

  private static ServeException badOutput(TensorSpec spec, String why) {
    return new ServeException(500, "bad_function_output", "output '" + spec.name() + "' does not match the "
        + "function's signature (" + spec.datatype() + " " + spec.shape() + "): " + why);
  }

  /**
   * Sends it: JSON alone, or (binary tensor data extension) the JSON, then the binary outputs' bytes, with
   * {@code Inference-Header-Content-Length} giving the JSON's length.
   */
  void send(RoutingContext ctx) {
    if (binary.isEmpty()) {
      Http.sendJson(ctx, 200, json);
      return;
    }
    byte[] head = json.toString().getBytes(StandardCharsets.UTF_8);
    Buffer body = Buffer.buffer(head.length + binary.stream().mapToInt(b -> b.length).sum()).appendBytes(head);
    binary.forEach(body::appendBytes);
    ctx.response().setStatusCode(200).putHeader("Content-Type", Http.OCTETS)
        .putHeader(HEADER_LENGTH, Integer.toString(head.length)).end(body);
  }
}
