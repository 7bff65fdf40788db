package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.server.FunctionNames;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServeException;
import io.vertx.core.buffer.Buffer;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Map;
import java.util.Optional;

/**
 * The native API: functions registered, listed and removed ({@code /v1/functions}, admin), and invoked with their
 * own JSON or raw bytes ({@code POST /v1/functions/{name}/invoke}), answered with {@code Server-Timing} and
 * {@code Thaw-Start}.
 */
final class NativeApi {

  private final Scheduler scheduler;
  private final Registrations registrations;
  private final Http http;
  private final byte[] adminToken;

  NativeApi(Scheduler scheduler, Registrations registrations, Http http, String adminToken) {
    this.scheduler = scheduler;
    this.registrations = registrations;
    this.http = http;
    this.adminToken = adminToken.getBytes(StandardCharsets.UTF_8);
  }

  void admin(Router router) {
    Endpoints.get(router, "/v1/functions").handler(this::list);
    state(router);
    router.put("/v1/functions/:name").handler(ctx -> Http.guard(ctx, () -> {
      checkAdmin(ctx);
      put(ctx);
    }));
    router.delete("/v1/functions/:name").handler(ctx -> Http.guard(ctx, () -> {
      checkAdmin(ctx);
      delete(ctx);
    }));
  }

  /** One function's state and cold-start traces. */
  void state(Router router) {
    Endpoints.get(router, "/v1/functions/:name").handler(this::get);
    Endpoints.get(router, "/v1/functions/:name/trace").handler(ctx -> Http.guard(ctx,
        () -> Http.sendJson(ctx, 200, scheduler.trace(name(ctx)))));
  }

  void invoke(Router router) {
    router.post("/v1/functions/:name/invoke").handler(ctx -> Http.guard(ctx, () -> invoke(ctx)));
  }

  /** True when the request carries the admin token. */
  boolean isAdmin(RoutingContext ctx) {
    String auth = ctx.request().getHeader("Authorization");
    byte[] given = auth != null && auth.regionMatches(true, 0, "Bearer ", 0, 7)
        ? auth.substring(7).trim().getBytes(StandardCharsets.UTF_8) : new byte[0];
    return MessageDigest.isEqual(given, adminToken);
  }

  private void checkAdmin(RoutingContext ctx) {
    if (!isAdmin(ctx)) {
      String auth = ctx.request().getHeader("Authorization");
      throw new ServeException(401, "unauthorized", auth == null ? "the admin API needs 'Authorization: Bearer TOKEN'"
          : "the bearer token is not the admin token");
    }
  }

  static String name(RoutingContext ctx) {
    String name = ctx.pathParam("name");
    if (!FunctionNames.valid(name)) {
      throw ServeException.badRequest("'" + name + "' is not a function name: lower-case letters, digits and inner "
          + "- . _, at most 63 characters");
    }
    ctx.put(Http.FUNCTION, name);
    return name;
  }

  private void list(RoutingContext ctx) {
    Http.guard(ctx, () -> {
      ObjectNode body = Http.object();
      ArrayNode fs = body.putArray("functions");
      boolean admin = isAdmin(ctx);
      for (String n : scheduler.names()) {
        if (!admin && registrations.tenants().owned(n)) {
          // A tenant's function is listed to the operator only.
          continue;
        }
        try {
          ObjectNode s = scheduler.status(n);
          fs.addObject().put("name", n).put("image", s.get("options").get("image").asText())
              .put("state", s.get("state").asText()).put("instances", s.get("instances").size());
        } catch (ServeException gone) {
          // Deleted between the two calls.
        }
      }
      body.put("instances", scheduler.factory().name());
      Http.sendJson(ctx, 200, body);
    });
  }

  private void get(RoutingContext ctx) {
    Http.guard(ctx, () -> Http.sendJson(ctx, 200, scheduler.status(name(ctx))));
  }

  private void put(RoutingContext ctx) {
    String name = name(ctx);
    FunctionOptions options;
    try {
      options = FunctionOptions.fromJson(http.json(ctx)).validate();
    } catch (IllegalArgumentException e) {
      throw ServeException.badRequest(e.getMessage());
    }
    ctx.vertx().executeBlocking(() -> registrations.registerAndSettle(name, options, null))
        .onComplete(ar -> Http.guard(ctx, () -> {
          if (ar.failed()) {
            Http.sendError(ctx, ar.cause());
            return;
          }
          Http.sendJson(ctx, ar.result().status(), ar.result().body());
        }));
  }

  private void delete(RoutingContext ctx) {
    String name = name(ctx);
    Http.onContext(ctx, registrations.unregister(name, null),
        (v, e) -> Http.sendJson(ctx, 200, Http.object().put("deleted", name)));
  }

  private void invoke(RoutingContext ctx) {
    String name = name(ctx);
    FunctionRequest request = request(ctx);
    Scheduler.Pending p = scheduler.submit(name, request);
    Http.onInvocation(ctx, p, (inv, e) -> {
      if (e != null) {
        Http.sendError(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      timingHeaders(ctx, inv);
      FunctionResponse r = inv.response();
      if (r.binary().isPresent()) {
        ByteBuffer b = r.binary().get().duplicate();
        byte[] bytes = new byte[b.remaining()];
        b.get(bytes);
        ctx.response().putHeader("Thaw-Response", r.json().toString()).putHeader("Content-Type", Http.OCTETS)
            .end(Buffer.buffer(bytes));
      } else {
        Http.sendJson(ctx, 200, r.json());
      }
    });
  }

  /**
   * {@code Thaw-Start}, and {@code Server-Timing} set as the headers go out, so that its {@code server} entry holds
   * the whole request inside the server, the response's encoding included.
   */
  static void timingHeaders(RoutingContext ctx, Invocation inv) {
    ctx.response().putHeader("Thaw-Start", inv.cold() ? "cold" : "warm");
    ctx.addHeadersEndHandler(v -> ctx.response().putHeader("Server-Timing", inv.serverTiming(Http.millisInside(ctx))));
  }

  /**
   * JSON as the function's request, or raw bytes with {@code application/octet-stream}: then the JSON beside them
   * is made of the query parameters ({@code ?rows=2}), numbers as numbers.
   */
  private FunctionRequest request(RoutingContext ctx) {
    String type = ctx.request().getHeader("Content-Type");
    if (type != null && Http.mediaType(type).equals(Http.OCTETS)) {
      ObjectNode json = Http.object();
      for (Map.Entry<String, String> q : ctx.queryParams()) {
        String v = q.getValue();
        if (v.matches("-?[0-9]{1,18}")) {
          json.put(q.getKey(), Long.parseLong(v));
        } else if (v.matches("-?[0-9]*\\.[0-9]+([eE][-+]?[0-9]+)?")) {
          json.put(q.getKey(), Double.parseDouble(v));
        } else if (v.equals("true") || v.equals("false")) {
          json.put(q.getKey(), Boolean.parseBoolean(v));
        } else {
          json.put(q.getKey(), v);
        }
      }
      Buffer body = ctx.body().buffer();
      byte[] bytes = body == null ? new byte[0] : body.getBytes();
      return new FunctionRequest(json, Optional.of(ByteBuffer.wrap(bytes)));
    }
    JsonNode json = http.json(ctx);
    if (!json.isObject()) {
      throw ServeException.badRequest("the request is a JSON object, not " + json.getNodeType().name().toLowerCase());
    }
    return FunctionRequest.of(json);
  }
}
