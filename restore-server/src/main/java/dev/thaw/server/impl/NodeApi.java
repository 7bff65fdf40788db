package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.server.FunctionNames;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServeException;
import io.vertx.core.http.HttpMethod;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.util.function.Predicate;

/**
 * Node mode's tenancy over HTTP: function pods register their functions through the node socket with their tenant
 * key ({@code PUT /v1/functions/{name}} with {@value Tenants#KEY_HEADER}; {@code DELETE} likewise), and every router
 * of the server hides a tenant's function from any request that carries neither its token
 * ({@value Tenants#TOKEN_HEADER}) nor the admin token: such a request gets exactly what a function that does not exist
 * gets. The guard matches the same route patterns as the APIs it guards, so it sees a function's name as they do
 * (percent-decoded, normalized).
 */
final class NodeApi {

  private final Registrations registrations;
  private final Tenants tenants;
  private final Http http;
  private final Predicate<RoutingContext> admin;

  /** @param admin true for a request that carries the admin token */
  NodeApi(Registrations registrations, Http http, Predicate<RoutingContext> admin) {
    this.registrations = registrations;
    this.tenants = registrations.tenants();
    this.http = http;
    this.admin = admin;
  }

  /** The guard, before every route that names a function. */
  void guard(Router r) {
    for (String path : new String[] {"/v1/functions/:name", "/v1/functions/:name/*", "/v2/models/:name",
        "/v2/models/:name/*"}) {
      r.route(path).handler(this::byPath);
    }
    r.post("/v1/completions").handler(this::byModel);
  }

  private void byPath(RoutingContext ctx) {
    String name = ctx.pathParam("name");
    HttpMethod m = ctx.request().method();
    boolean registration = (m == HttpMethod.PUT || m == HttpMethod.DELETE)
        && ctx.request().getHeader(Tenants.KEY_HEADER) != null && !ctx.normalizedPath().endsWith("/");
    if (registration || mayReach(ctx, name)) {
      ctx.next();
    } else {
      Http.sendError(ctx, ServeException.notFound(name));
    }
  }

  /** A completion names its function in the body's {@code model}: a model it may not reach does not exist. */
  private void byModel(RoutingContext ctx) {
    String model = null;
    try {
      JsonNode body = http.json(ctx);
      model = body.path("model").isTextual() ? body.get("model").asText() : null;
    } catch (ServeException unreadable) {
      // The API answers a body it cannot read.
    }
    if (model == null || mayReach(ctx, model)) {
      ctx.next();
    } else {
      OpenAiError.send(ctx, OpenAiError.modelNotFound(model));
    }
  }

  private boolean mayReach(RoutingContext ctx, String name) {
    return !FunctionNames.valid(name) || tenants.opens(name, ctx.request().getHeader(Tenants.TOKEN_HEADER))
        || admin.test(ctx);
  }

  /** Tenant registration, for the node socket's router: PUT and DELETE with the tenant key. */
  void registration(Router r) {
    r.put("/v1/functions/:name").handler(ctx -> Http.guard(ctx, () -> put(ctx)));
    r.delete("/v1/functions/:name").handler(ctx -> Http.guard(ctx, () -> delete(ctx)));
  }

  private void put(RoutingContext ctx) {
    String name = NativeApi.name(ctx);
    String key = ctx.request().getHeader(Tenants.KEY_HEADER);
    Tenants.hash(key);
    FunctionOptions options;
    try {
      options = FunctionOptions.fromJson(http.json(ctx)).validate();
    } catch (IllegalArgumentException e) {
      throw ServeException.badRequest(e.getMessage());
    }
    ctx.vertx().executeBlocking(() -> registrations.registerAndSettle(name, options, key))
        .onComplete(ar -> Http.guard(ctx, () -> {
          if (ar.failed()) {
            Http.sendError(ctx, ar.cause());
            return;
          }
          Registrations.Outcome o = ar.result();
          ctx.response().putHeader(Tenants.TOKEN_HEADER, o.body().path("token").asText());
          Http.sendJson(ctx, o.status(), o.body());
        }));
  }

  private void delete(RoutingContext ctx) {
    String name = NativeApi.name(ctx);
    String key = ctx.request().getHeader(Tenants.KEY_HEADER);
    Tenants.hash(key);
    Http.onContext(ctx, registrations.unregister(name, key),
        (v, e) -> Http.sendJson(ctx, 200, Http.object().put("deleted", name)));
  }
}
