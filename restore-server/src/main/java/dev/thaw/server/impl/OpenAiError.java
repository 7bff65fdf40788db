package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.server.ServeException;
import io.vertx.ext.web.RoutingContext;

/**
 * A failure with the fields of OpenAI's error object ({@code type} and {@code param} beside the status, code and
 * message), and the sending of any failure in that object's shape.
 */
final class OpenAiError extends ServeException {
  final String type;
  final String param;

  OpenAiError(int status, String type, String code, String param, String message) {
    super(status, code, message);
    this.type = type;
    this.param = param;
  }

  /** 400 without a code: the request's {@code param} is wrong as the message says. */
  static OpenAiError invalid(String message, String param) {
    return new OpenAiError(400, "invalid_request_error", null, param, message);
  }

  /** 400 {@code unsupported_parameter}: a parameter OpenAI has that this server does not do. */
  static OpenAiError unsupported(String param, String message) {
    return new OpenAiError(400, "invalid_request_error", "unsupported_parameter", param, message);
  }

  /** 404 {@code model_not_found}, as OpenAI answers a model it does not serve. */
  static OpenAiError modelNotFound(String id) {
    return new OpenAiError(404, "invalid_request_error", "model_not_found", "model", "The model '" + id
        + "' does not exist");
  }

  /**
   * {@code {"error": {"message", "type", "param", "code", "requestId"}}} with the status OpenAI would use: 400 a bad
   * request, 404 an unknown model or path, 429 a full queue and 503 no capacity (both with {@code Retry-After}), 5xx
   * the server's. The message is the server's safe one ({@link Http#clientError}: a 5xx never carries a worker's
   * output), and the request's id is there as in every error of the server.
   */
  static void send(RoutingContext ctx, Throwable failure) {
    if (ctx.response().ended() || ctx.response().closed()) {
      return;
    }
    ServeException e = Http.asServeException(failure);
    Http.ClientError c = Http.clientError(ctx, failure);
    if (c.retryAfterSeconds() > 0) {
      ctx.response().putHeader("Retry-After", Long.toString(c.retryAfterSeconds()));
    }
    ObjectNode error = Http.object();
    ObjectNode inner = error.putObject("error");
    inner.put("message", c.message());
    inner.put("type", e instanceof OpenAiError o ? o.type : type(c.status()));
    if (e instanceof OpenAiError o && o.param != null) {
      inner.put("param", o.param);
    } else {
      inner.putNull("param");
    }
    if (e.code() == null) {
      inner.putNull("code");
    } else {
      inner.put("code", c.code());
    }
    inner.put("requestId", Http.requestId(ctx));
    Http.sendJson(ctx, c.status(), error);
  }

  /** OpenAI's error type for a status the server's own errors carry. */
  private static String type(int status) {
    return switch (status) {
      case 400, 404, 413, 415 -> "invalid_request_error";
      case 401 -> "authentication_error";
      case 429 -> "rate_limit_error";
      default -> status >= 500 ? "server_error" : "invalid_request_error";
    };
  }

  /**
   * The {@code error} event of a stream whose status is gone: the failure's own message and code, its type by its
   * status, no param.
   */
  static ObjectNode event(Throwable failure) {
    ServeException e = Http.asServeException(failure);
    ObjectNode error = Http.object();
    error.putObject("error").put("message", e.getMessage()).put("type", e.status() >= 500 ? "server_error"
        : "invalid_request_error").putNull("param").put("code", e.code());
    return error;
  }
}
