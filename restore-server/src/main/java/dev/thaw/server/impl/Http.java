package dev.thaw.server.impl;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.StrictJson;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import io.vertx.core.Context;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.ext.web.RoutingContext;
import java.io.IOException;
import java.util.Locale;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.BiConsumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** What every endpoint shares: bounded JSON in, JSON and errors out, results handed back to the event loop. */
final class Http {

  static final String JSON = "application/json";
  static final String OCTETS = "application/octet-stream";
  /** Set on the routing context by whichever handler served a function, for the request's log line. */
  static final String INVOCATION = "thaw.invocation";
  static final String FUNCTION = "thaw.function";
  /** When the request arrived (its headers read), on the {@link System#nanoTime()} clock. */
  static final String RECEIVED = "thaw.received";

  /** The request's id: the client's {@code X-Request-Id} where it is sane, else the server's own. */
  static final String REQUEST_ID = "thaw.requestId";
  /** The response header that carries {@link #REQUEST_ID}. */
  static final String REQUEST_ID_HEADER = "Thaw-Request-Id";
  private static final ObjectMapper WRITER = new ObjectMapper();
  private static final Logger ERRORS = LoggerFactory.getLogger(ServerLogs.ERRORS);
  private static final Pattern CUDA_ERROR = Pattern.compile("CUDA_ERROR_[A-Z0-9_]+");

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
      end(ctx, r.setStatusCode(status).putHeader("Content-Type", JSON), Buffer.buffer(WRITER.writeValueAsBytes(body)));
    } catch (JsonProcessingException e) {
      r.setStatusCode(500).end();
    }
  }

  /**
   * Ends the response with {@code body}; a HEAD request's with its length alone (over HTTP/2, which a client reaches by
   * an h2c upgrade, Vert.x would send a HEAD response's body).
   */
  static void end(RoutingContext ctx, HttpServerResponse r, Buffer body) {
    if (ctx.request().method() == HttpMethod.HEAD) {
      r.putHeader("Content-Length", Integer.toString(body.length())).end();
    } else {
      r.end(body);
    }
  }

  /**
   * The error as {@code {"error": reason, "code": code, "kind": kind, "requestId": id}} with its status (and
   * {@code Retry-After}); {@code kind} only for a worker's failure ({@link ClientError}).
   */
  static void sendError(RoutingContext ctx, Throwable failure) {
    HttpServerResponse r = ctx.response();
    if (r.ended() || r.closed()) {
      return;
    }
    ClientError e = clientError(ctx, failure);
    if (e.retryAfterSeconds() > 0) {
      r.putHeader("Retry-After", Long.toString(e.retryAfterSeconds()));
    }
    if (e.status() == 401) {
      r.putHeader("WWW-Authenticate", "Bearer");
    }
    ObjectNode body = object().put("error", e.message()).put("code", e.code());
    if (e.kind() != null) {
      body.put("kind", e.kind());
    }
    sendJson(ctx, e.status(), body.put("requestId", requestId(ctx)));
  }

  /**
   * What a client is told of a failure. A refusal (4xx) says what is wrong with the request. A server-side failure
   * (5xx) says only a reason fixed by its code, the worker's error kind and, for a device fault, the CUDA error's
   * name: the full message (a worker's pid, its log's last lines, which hold whatever the function printed, paths)
   * goes to the server's log under the request's id, where an operator finds it from the id the client got.
   *
   * @param kind the worker's {@link WorkerErrorKind} in lower case, or null when no worker failed
   */
  record ClientError(int status, String code, String message, String kind, long retryAfterSeconds) {}

  static ClientError clientError(RoutingContext ctx, Throwable failure) {
    Throwable t = unwrap(failure);
    ServeException e = asServeException(t);
    String kind = t instanceof WorkerException w ? w.kind().name().toLowerCase(Locale.ROOT) : null;
    if (e.status() < 500) {
      return new ClientError(e.status(), e.code(), e.getMessage(), kind, e.retryAfterSeconds());
    }
    String detail = t instanceof ServeException ? t.getMessage() : t.toString();
    String line = "request " + requestId(ctx) + " " + ctx.request().method() + " " + ctx.request().path() + ": "
        + e.status() + " " + e.code() + ": " + detail;
    if (e.status() == 503) {
      ERRORS.info(line);
    } else if (t instanceof ServeException || t instanceof WorkerException || t instanceof CudaException) {
      ERRORS.warn(line);
    } else {
      ERRORS.warn(line, t); // unforeseen: where it came from too
    }
    return new ClientError(e.status(), e.code(), reason(e, t), kind, e.retryAfterSeconds());
  }

  private static String reason(ServeException e, Throwable t) {
    return switch (e.code()) {
      case "device_fault" -> {
        Matcher cuda = CUDA_ERROR.matcher(String.valueOf(e.getMessage()));
        String which = cuda.find() ? " (" + cuda.group() + ")" : "";
        yield t instanceof WorkerException
            ? "the function faulted the GPU" + which + "; its worker is discarded and the next request starts a "
                + "fresh one"
            : "the function faulted the GPU" + which + ", which leaves CUDA in this server's process unusable: the "
                + "server reports not live (/v2/health/live 503) until it is restarted";
      }
      case "instance_lost" -> "the instance's worker was lost; the next request starts a fresh one";
      case "start_failed" -> "the function could not start";
      case "no_capacity" -> "the function does not fit on a device now";
      case "no_worker" -> "no worker is free now";
      case "draining" -> "the server is shutting down";
      case "no_tokenizer" -> "the model's tokenizer is not available";
      // The server's own words: the image's tag and the chunk's digest; the output and the signature it breaks; the
      // reference a tenant registered and the registry's answer.
      case "image_damaged", "bad_function_output", "image_pull_failed" -> e.getMessage();
      default -> t instanceof WorkerException w && w.kind() == WorkerErrorKind.FUNCTION ? "the function failed"
          : "internal error";
    };
  }

  static ServeException asServeException(Throwable failure) {
    Throwable t = unwrap(failure);
    if (t instanceof ServeException s) {
      return s;
    }
    if (t instanceof InvalidRequestException) {
      return new ServeException(400, "invalid_request", t.getMessage());
    }
    if (t instanceof WorkerException w && w.kind() == WorkerErrorKind.CUDA_STICKY) {
      // The function's own fault (its kernel read an unmapped address, say): its worker's context is poisoned for
      // good and the worker is discarded; instances of other functions run in other processes and never see it.
      return new ServeException(502, "device_fault", w.getMessage());
    }
    if (CudaException.stickyIn(t) != null) {
      // In this process (instances in process): CUDA here is unusable until the process ends; liveness says so.
      return new ServeException(502, "device_fault", t.getMessage());
    }
    if (t instanceof WorkerException w && w.workerLost()) {
      return new ServeException(502, "instance_lost", w.getMessage());
    }
    return new ServeException(500, "internal_error", t.getClass().getSimpleName()
        + (t.getMessage() == null ? "" : ": " + t.getMessage()));
  }

  /** The request's id ({@link #REQUEST_ID}), or {@code "-"} for one that did not pass the routers' first handler. */
  static String requestId(RoutingContext ctx) {
    String id = ctx.get(REQUEST_ID);
    return id == null ? "-" : id;
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
