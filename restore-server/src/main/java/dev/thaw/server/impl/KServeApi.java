package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.server.ServeException;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The KServe Open Inference Protocol (v2) over HTTP/REST: health, model metadata and readiness, and
 * {@code infer}. A function is a model; its declared tensors ({@link FunctionSignature}) are the model's inputs
 * and outputs. An input tensor's flat {@code data} is reshaped into the nested array its field of the function's
 * JSON holds; the request's {@code parameters} become other fields of it (e.g. {@code maxNewTokens}). Output
 * tensors are the response's fields of the declared names, flattened, with the shape their nesting has.
 */
final class KServeApi {

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  /** Elements one tensor may hold; the body limit bounds it too. */
  private static final long MAX_ELEMENTS = 1L << 26;

  private final Scheduler scheduler;
  private final Http http;

  KServeApi(Scheduler scheduler, Http http) {
    this.scheduler = scheduler;
    this.http = http;
  }

  void routes(Router router) {
    router.get("/v2/health/live").handler(ctx -> {
      String poisoned = scheduler.poisoned();
      Http.sendJson(ctx, poisoned == null ? 200 : 503, poisoned == null ? Http.object().put("live", true)
          : Http.object().put("live", false).put("reason", poisoned));
    });
    router.get("/v2/health/ready").handler(ctx -> {
      boolean ready = scheduler.ready();
      Http.sendJson(ctx, ready ? 200 : 503, Http.object().put("ready", ready));
    });
    router.get("/v2").handler(ctx -> {
      ObjectNode s = Http.object().put("name", "thaw").put("version", "2");
      s.putArray("extensions");
      Http.sendJson(ctx, 200, s);
    });
    router.get("/v2/models/:name").handler(ctx -> Http.guard(ctx, () -> metadata(ctx)));
    router.get("/v2/models/:name/ready").handler(ctx -> Http.guard(ctx, () -> {
      String name = NativeApi.name(ctx);
      image(name);
      boolean ready = scheduler.ready(name);
      Http.sendJson(ctx, ready ? 200 : 503, Http.object().put("name", name).put("ready", ready));
    }));
    router.post("/v2/models/:name/infer").handler(ctx -> Http.guard(ctx, () -> infer(ctx)));
  }

  private ImageInfo image(String name) {
    return scheduler.image(name).orElseThrow(() -> ServeException.notFound(name));
  }

  private void metadata(RoutingContext ctx) {
    String name = NativeApi.name(ctx);
    ImageInfo image = image(name);
    ObjectNode m = Http.object();
    m.put("name", name);
    m.putArray("versions").add(image.tag());
    m.put("platform", "thaw");
    m.set("inputs", Signatures.tensors(image.signature().inputs()));
    m.set("outputs", Signatures.tensors(image.signature().outputs()));
    Http.sendJson(ctx, 200, m);
  }

  private void infer(RoutingContext ctx) {
    String name = NativeApi.name(ctx);
    ImageInfo image = image(name);
    FunctionSignature sig = image.signature();
    if (sig.inputs().isEmpty()) {
      throw ServeException.badRequest("function '" + name + "' declares no input tensors; invoke it at "
          + "/v1/functions/" + name + "/invoke");
    }
    JsonNode body = http.json(ctx);
    ObjectNode request = toFunctionRequest(body, sig);
    JsonNode requested = body.get("outputs");
    String id = body.hasNonNull("id") ? body.get("id").asText() : null;
    Scheduler.Pending p = scheduler.submit(name, FunctionRequest.of(request));
    Http.onInvocation(ctx, p, (inv, e) -> {
      if (e != null) {
        Http.sendError(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      NativeApi.timingHeaders(ctx, inv);
      ObjectNode out = Http.object();
      out.put("model_name", name);
      out.put("model_version", image.tag());
      if (id != null) {
        out.put("id", id);
      }
      out.set("outputs", outputs(inv.response().json(), sig, requested));
      Http.sendJson(ctx, 200, out);
    });
  }

  static ObjectNode toFunctionRequest(JsonNode body, FunctionSignature sig) {
    if (!body.isObject()) {
      throw ServeException.badRequest("an inference request is a JSON object with 'inputs'");
    }
    ObjectNode request = NODES.objectNode();
    JsonNode params = body.get("parameters");
    if (params != null && !params.isNull()) {
      if (!params.isObject()) {
        throw ServeException.badRequest("'parameters' is an object");
      }
      request.setAll((ObjectNode) params);
    }
    JsonNode inputs = body.get("inputs");
    if (inputs == null || !inputs.isArray() || inputs.isEmpty()) {
      throw ServeException.badRequest("'inputs' is a non-empty array of tensors");
    }
    Map<String, TensorSpec> declared = new HashMap<>();
    sig.inputs().forEach(t -> declared.put(t.name(), t));
    for (JsonNode in : inputs) {
      String tensor = in.path("name").asText(null);
      TensorSpec spec = tensor == null ? null : declared.remove(tensor);
      if (spec == null) {
        throw ServeException.badRequest(tensor == null ? "every input needs a 'name'"
            : "no input tensor '" + tensor + "' (or given twice); the model takes " + names(sig.inputs()));
      }
      String datatype = in.path("datatype").asText("");
      if (!datatype.equals(spec.datatype())) {
        throw ServeException.badRequest("input '" + tensor + "' is " + spec.datatype() + ", not '" + datatype + "'");
      }
      List<Long> shape = shape(in.get("shape"), tensor);
      if (shape.size() != spec.shape().size()) {
        throw ServeException.badRequest("input '" + tensor + "' has " + spec.shape().size() + " dimensions "
            + spec.shape() + ", not " + shape.size());
      }
      long elements = 1;
      for (int i = 0; i < shape.size(); i++) {
        long want = spec.shape().get(i);
        if (want != -1 && want != shape.get(i)) {
          throw ServeException.badRequest("input '" + tensor + "': dimension " + i + " is " + want + ", not "
              + shape.get(i));
        }
        elements *= shape.get(i);
        if (elements > MAX_ELEMENTS) {
          throw ServeException.badRequest("input '" + tensor + "' is too large");
        }
      }
      List<JsonNode> flat = new ArrayList<>();
      flatten(in.get("data"), flat, tensor);
      if (flat.size() != elements) {
        throw ServeException.badRequest("input '" + tensor + "' of shape " + shape + " needs " + elements
            + " elements in 'data', not " + flat.size());
      }
      for (JsonNode v : flat) {
        checkElement(v, spec.datatype(), tensor);
      }
      int[] at = {0};
      request.set(tensor, nest(flat, shape, 0, at));
    }
    if (!declared.isEmpty()) {
      throw ServeException.badRequest("missing input tensors " + declared.keySet());
    }
    return request;
  }

  private static List<Long> shape(JsonNode s, String tensor) {
    if (s == null || !s.isArray()) {
      throw ServeException.badRequest("input '" + tensor + "' needs a 'shape', an array of sizes");
    }
    List<Long> shape = new ArrayList<>();
    for (JsonNode d : s) {
      if (!d.isIntegralNumber() || d.longValue() < 1) {
        throw ServeException.badRequest("input '" + tensor + "': every size of 'shape' is a positive integer");
      }
      shape.add(d.longValue());
    }
    return shape;
  }

  private static void flatten(JsonNode data, List<JsonNode> out, String tensor) {
    if (data == null) {
      throw ServeException.badRequest("input '" + tensor + "' needs 'data'");
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

  private static void checkElement(JsonNode v, String datatype, String tensor) {
    boolean ok = switch (datatype) {
      case "BOOL" -> v.isBoolean();
      case "FP16", "FP32", "FP64", "BF16" -> v.isNumber();
      case "BYTES" -> v.isTextual();
      default -> v.isIntegralNumber();
    };
    if (!ok) {
      throw ServeException.badRequest("input '" + tensor + "' is " + datatype + "; " + v + " is not one");
    }
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

  static ArrayNode outputs(JsonNode response, FunctionSignature sig, JsonNode requested) {
    List<String> wanted = new ArrayList<>();
    if (requested != null && requested.isArray() && !requested.isEmpty()) {
      requested.forEach(o -> wanted.add(o.path("name").asText()));
    } else {
      sig.outputs().forEach(t -> wanted.add(t.name()));
    }
    ArrayNode out = NODES.arrayNode();
    for (TensorSpec t : sig.outputs()) {
      JsonNode value = response.get(t.name());
      if (!wanted.contains(t.name()) || value == null) {
        continue;
      }
      List<Long> shape = new ArrayList<>();
      JsonNode n = value;
      while (n.isArray()) {
        shape.add((long) n.size());
        n = n.size() > 0 ? n.get(0) : NODES.nullNode();
      }
      List<JsonNode> flat = new ArrayList<>();
      flatten(value, flat, t.name());
      ObjectNode o = out.addObject();
      o.put("name", t.name());
      o.put("datatype", t.datatype());
      ArrayNode s = o.putArray("shape");
      shape.forEach(s::add);
      o.putArray("data").addAll(flat);
    }
    return out;
  }

  private static List<String> names(List<TensorSpec> specs) {
    return specs.stream().map(TensorSpec::name).toList();
  }
}
