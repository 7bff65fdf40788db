package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.server.ServeException;
import io.vertx.core.buffer.Buffer;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.nio.ByteBuffer;

/**
 * The KServe Open Inference Protocol (v2) over HTTP/REST: health, server and model metadata, model readiness and
 * {@code infer}, each model route also under {@code /versions/{version}}, every GET also as HEAD. A function is a
 * model, and its version is the image tag it serves: another version is 404. Its declared tensors
 * ({@link FunctionSignature}) are the model's inputs and outputs ({@link KServeRequest}, {@link KServeResponse});
 * tensors travel as JSON or with the binary tensor data extension ({@link TensorData}).
 */
final class KServeApi {

  static final String EXTENSION = "binary_tensor_data";

  private final Scheduler scheduler;
  private final Http http;

  KServeApi(Scheduler scheduler, Http http) {
    this.scheduler = scheduler;
    this.http = http;
  }

  void routes(Router router) {
    Endpoints.get(router, "/v2/health/live").handler(ctx -> {
      String poisoned = scheduler.poisoned();
      Http.sendJson(ctx, poisoned == null ? 200 : 503, poisoned == null ? Http.object().put("live", true)
          : Http.object().put("live", false).put("reason", poisoned));
    });
    Endpoints.get(router, "/v2/health/ready").handler(ctx -> {
      boolean ready = scheduler.ready();
      Http.sendJson(ctx, ready ? 200 : 503, Http.object().put("ready", ready));
    });
    Endpoints.get(router, "/v2").handler(ctx -> {
      ObjectNode s = Http.object().put("name", "thaw").put("version", "2");
      s.putArray("extensions").add(EXTENSION);
      Http.sendJson(ctx, 200, s);
    });
    for (String model : new String[] {"/v2/models/:name", "/v2/models/:name/versions/:version"}) {
      Endpoints.get(router, model).handler(ctx -> Http.guard(ctx, () -> metadata(ctx)));
      Endpoints.get(router, model + "/ready").handler(ctx -> Http.guard(ctx, () -> ready(ctx)));
      router.post(model + "/infer").handler(ctx -> Http.guard(ctx, () -> infer(ctx)));
    }
  }

  /** The model the path names, at the version it names if it names one. */
  private ImageInfo image(RoutingContext ctx) {
    String name = NativeApi.name(ctx);
    ImageInfo image = scheduler.image(name).orElseThrow(() -> ServeException.notFound(name));
    String version = ctx.pathParam("version");
    if (version != null && !version.equals(image.tag())) {
      throw new ServeException(404, "version_not_found", "model '" + name + "' has no version '" + version
          + "'; it serves version '" + image.tag() + "'");
    }
    return image;
  }

  private void metadata(RoutingContext ctx) {
    ImageInfo image = image(ctx);
    ObjectNode m = Http.object();
    m.put("name", NativeApi.name(ctx));
    m.putArray("versions").add(image.tag());
    m.put("platform", "thaw");
    m.set("inputs", Signatures.tensors(image.signature().inputs()));
    m.set("outputs", Signatures.tensors(image.signature().outputs()));
    Http.sendJson(ctx, 200, m);
  }

  private void ready(RoutingContext ctx) {
    image(ctx);
    String name = NativeApi.name(ctx);
    boolean ready = scheduler.ready(name);
    Http.sendJson(ctx, ready ? 200 : 503, Http.object().put("name", name).put("ready", ready));
  }

  private void infer(RoutingContext ctx) {
    ImageInfo image = image(ctx);
    String name = NativeApi.name(ctx);
    FunctionSignature sig = image.signature();
    if (sig.inputs().isEmpty()) {
      throw ServeException.badRequest("function '" + name + "' declares no input tensors; invoke it at "
          + "/v1/functions/" + name + "/invoke");
    }
    KServeRequest request = request(ctx, sig);
    Scheduler.Pending p = scheduler.submit(name, FunctionRequest.of(request.function()));
    Http.onInvocation(ctx, p, (inv, e) -> {
      if (e != null) {
        Http.sendError(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      KServeResponse response = KServeResponse.of(name, image.tag(), request, inv.response().json());
      NativeApi.timingHeaders(ctx, inv);
      response.send(ctx);
    });
  }

  /**
   * The body as an inference request: JSON, or with {@code Inference-Header-Content-Length} the JSON header of that
   * many bytes and the tensors' binary data after it (0: the bytes of the model's one input alone).
   */
  private KServeRequest request(RoutingContext ctx, FunctionSignature sig) {
    String headerLength = ctx.request().getHeader(KServeResponse.HEADER_LENGTH);
    if (headerLength == null) {
      String type = ctx.request().getHeader("Content-Type");
      if (type != null && Http.mediaType(type).equals(Http.OCTETS)) {
        throw ServeException.badRequest("binary tensor data needs the " + KServeResponse.HEADER_LENGTH + " header: "
            + "the length of the JSON header before the tensors' bytes (0 when there is none)");
      }
      return KServeRequest.read(http.json(ctx), null, sig);
    }
    Buffer body = ctx.body().buffer();
    int length = body == null ? 0 : body.length();
    long jsonLength;
    try {
      jsonLength = Long.parseLong(headerLength.trim());
    } catch (NumberFormatException e) {
      jsonLength = -1;
    }
    if (jsonLength < 0 || jsonLength > length) {
      throw ServeException.badRequest(KServeResponse.HEADER_LENGTH + " is the length of the JSON header, from 0 to "
          + "the body's " + length + " bytes, not '" + headerLength + "'");
    }
    ByteBuffer bytes = ByteBuffer.wrap(body == null ? new byte[0] : body.getBytes());
    if (jsonLength == 0) {
      return KServeRequest.raw(bytes, sig);
    }
    JsonNode header = http.parse(body.getBuffer(0, (int) jsonLength));
    return KServeRequest.read(header, bytes.slice((int) jsonLength, length - (int) jsonLength), sig);
  }
}
