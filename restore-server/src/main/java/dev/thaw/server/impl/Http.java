package dev.thaw.server.impl;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.StrictJson;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.server.ServeException;
import io.vertx.core.Context;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.ext.web.RoutingContext;
import java.io.IOException;
import java.util.Locale;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.BiConsumer;

/** What every endpoint shares: bounded JSON in, JSON and errors out, results handed back to the event loop. */
final class Http {

  static final String JSON = "application/json";
  static final String OCTETS = "application/octet-stream";
  /** Set on the routing context by whichever handler served a function, for the request's log line. */
  static final String INVOCATION = "thaw.invocation";
  static final String FUNCTION = "thaw.function";
  /** When the request arrived (its headers read), on the {@link System#nanoTime()} clock. */
  static final String RECEIVED = "thaw.received";

  private static final ObjectMapper WRITER = new ObjectMapper();

  private final ObjectMapper reader;

  Http(int maxJsonDepth) {
    this.reader = StrictJson.configure(new ObjectMapper(JsonFactory.builder()
        .streamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(maxJsonDepth).build()).build()));
  }

  /**
   * The body as JSON.
   *
   * @throws ServeException 415 if it is not sent as JSON, 400 if it is not JSON, is nested too deep, has a key twice
   *     or anything after its value ({@link StrictJson}, as the CLI reads it)
   */
  JsonNode json(RoutingContext ctx) {
    if (!isJson(ctx.request().getHeader("Content-Type"))) {
      throw new ServeException(415, "unsupported_media_type", "send the body as " + JSON + ", not "
          + ctx.request().getHeader("Content-Type"));
    }
    return parse(ctx.body().buffer());
  }

  JsonNode parse(Buffer body) {
    if (body == null || body.length() == 0) {
      throw ServeException.badRequest("the body is empty; a JSON object is expected");
    }
    try {
      JsonNode node = reader.readTree(body.getBytes());
      if (node == null || node.isMissingNode()) {
        throw ServeException.badRequest("the body is empty; a JSON object is expected");
      }
      return node;
    } catch (JsonProcessingException e) {
      throw ServeException.badRequest("the body is not valid JSON: " + StrictJson.problem(e));
    } catch (IOException e) {
      throw ServeException.badRequest("the body cannot be read: " + e.getMessage());
    }
  }

  static boolean isJson(String contentType) {
    if (contentType == null) {
      return false;
    }
    String type = mediaType(contentType);
    return type.equals(JSON) || (type.startsWith("application/") && type.endsWith("+json"));
  }

  static String mediaType(String contentType) {
    int semi = contentType.indexOf(';');
    return (semi < 0 ? contentType : contentType.substring(0, semi)).trim().toLowerCase(Locale.ROOT);
  }

  static ObjectNode object() {
    return JsonNodeFactory.instance.objectNode();
  }

  static void sendJson(RoutingContext ctx, int status, JsonNode body) {
    HttpServerResponse r = ctx.response();
    if (r.ended() || r.closed()) {
      return;
    }
    try {
      r.setStatusCode(status).putHeader("Content-Type", JSON).end(Buffer.buffer(WRITER.writeValueAsBytes(body)));
    } catch (JsonProcessingException e) {
      r.setStatusCode(500).end();
    }
  }

  /** The error as {@code {"error": message, "code": code}} with its status (and {@code Retry-After}). */
  static void sendError(RoutingContext ctx, Throwable failure) {
    ServeException e = asServeException(failure);
    HttpServerResponse r = ctx.response();
    if (r.ended() || r.closed()) {
      return;
    }
    if (e.retryAfterSeconds() > 0) {
      r.putHeader("Retry-After", Long.toString(e.retryAfterSeconds()));
    }
    if (e.status() == 401) {
      r.putHeader("WWW-Authenticate", "Bearer");
    }
    sendJson(ctx, e.status(), object().put("error", e.getMessage()).put("code", e.code()));
  }

  static ServeException asServeException(Throwable failure) {
    Throwable t = unwrap(failure);
    if (t instanceof ServeException s) {
      return s;
    }
    if (t instanceof InvalidRequestException) {
      return new ServeException(400, "invalid_request", t.getMessage());
    }
    if (t instanceof dev.thaw.pool.WorkerException w && w.kind() == dev.thaw.pool.WorkerErrorKind.CUDA_STICKY) {
      // The function's own fault (its kernel read an unmapped address, say): its worker's context is poisoned for
      // good and the worker is discarded; instances of other functions run in other processes and never see it.
      return new ServeException(502, "device_fault", "the function faulted the GPU with a sticky CUDA error; its "
          + "worker (pid " + w.pid() + ") is discarded and the next request starts a fresh one: " + w.detail());
    }
    if (CudaException.stickyIn(t) != null) {
      // In this process (instances in process): CUDA here is unusable until the process ends; liveness says so.
      return new ServeException(502, "device_fault", "the function faulted the GPU with a sticky CUDA error, which "
          + "leaves CUDA in this server's process unusable: the server reports not live (/v2/health/live 503) until "
          + "it is restarted: " + t.getMessage());
    }
    if (t instanceof dev.thaw.pool.WorkerException w && w.workerLost()) {
      return new ServeException(502, "instance_lost", "the instance's worker was lost (" + w.kind() + "): "
          + w.getMessage());
    }
    return new ServeException(500, "internal_error", t.getClass().getSimpleName()
        + (t.getMessage() == null ? "" : ": " + t.getMessage()));
  }

  static Throwable unwrap(Throwable t) {
    while (t instanceof CompletionException && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  /** Runs {@code then} on the request's event loop when {@code f} completes; nothing if the client left. */
  static <T> void onContext(RoutingContext ctx, CompletableFuture<T> f, BiConsumer<T, Throwable> then) {
    Context context = Vertx.currentContext();
    f.whenComplete((v, e) -> context.runOnContext(x -> {
      if (unwrap(e) instanceof CancellationException) {
        return;
      }
      try {
        then.accept(v, e);
      } catch (RuntimeException ex) {
        sendError(ctx, ex);
      }
    }));
  }

  /**
   * Runs {@code then} on the request's event loop when its invocation completes; a client that leaves cancels a request
   * still queued; shortly before a long invoke's predicted end the event loop stops sleeping and polls for the answer
   * ({@link Scheduler.Pending#onNearlyDone}).
   */
  static void onInvocation(RoutingContext ctx, Scheduler.Pending p, BiConsumer<Invocation, Throwable> then) {
    ctx.response().closeHandler(v -> p.cancel());
    Context context = Vertx.currentContext();
    p.onNearlyDone(() -> context.runOnContext(v -> p.awaitAwake()));
    onContext(ctx, p.result(), then);
  }

  /** Milliseconds since the request arrived. */
  static double millisInside(RoutingContext ctx) {
    Long received = ctx.get(RECEIVED);
    return received == null ? 0 : (System.nanoTime() - received) / 1e6;
  }

  /** Runs a handler body, turning what it throws into an error response. */
  static void guard(RoutingContext ctx, Runnable body) {
    try {
      body.run();
    } catch (RuntimeException e) {
      sendError(ctx, e);
    }
  }
}
