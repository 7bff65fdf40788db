package dev.thaw.server.impl;

import dev.thaw.image.store.ChunkStore;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.StartupTimeline;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpMethod;
import io.vertx.ext.web.Route;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import io.vertx.ext.web.handler.BodyHandler;
import java.util.Map;
import java.util.stream.Collectors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The server's routes, on one router or split over two ports: the invoke endpoints (native invoke, KServe v2,
 * OpenAI's completions, chat and models, health) and the rest (admin API, function state and traces, metrics). Every request is bounded
 * ({@link ServerOptions#maxBodyBytes()}, {@link ServerOptions#maxJsonDepth()}) and logged in one line with its
 * phases.
 */
public final class Endpoints implements AutoCloseable {

  /** The request log: one INFO line per request. */
  public static final String REQUEST_LOG = "dev.thaw.server.requests";
  private static final Logger LOG = LoggerFactory.getLogger(REQUEST_LOG);

  private final ServerOptions options;
  private final PrometheusMeterRegistry metrics;
  private final ProcessMetrics processMetrics;
  private final NativeApi nativeApi;
  private final KServeApi kserve;
  private final OpenAiApi openAi;
  private final String labels;
  private final RequestLog requestLog = new RequestLog(LOG);
  private final HttpWarmup warmup = new HttpWarmup();
  private final StartupTimeline timeline;

  public Endpoints(ServerOptions options, Scheduler scheduler, ChunkStore store, PrometheusMeterRegistry metrics,
      String adminToken) {
    this(options, scheduler, store, metrics, adminToken, null);
  }

  /** @param timeline the process's way to its first response, logged with it; null for none */
  public Endpoints(ServerOptions options, Scheduler scheduler, ChunkStore store, PrometheusMeterRegistry metrics,
      String adminToken, StartupTimeline timeline) {
    this.timeline = timeline;
    this.options = options;
    this.metrics = metrics;
    this.processMetrics = new ProcessMetrics(metrics);
    Http http = new Http(options.maxJsonDepth());
    this.nativeApi = new NativeApi(scheduler, store, http, adminToken);
    this.kserve = new KServeApi(scheduler, http);
    this.openAi = new OpenAiApi(scheduler, http);
    this.labels = options.labels().isEmpty() ? "" : " " + options.labels().entrySet().stream()
        .map(e -> e.getKey() + "=" + e.getValue()).collect(Collectors.joining(" "));
  }

  /** Every route on one router. */
  public Router all(Vertx vertx) {
    Router r = base(vertx);
    invokeRoutes(r);
    adminRoutes(r);
    return finish(r);
  }

  /** The invoke endpoints only, for {@link ServerOptions#invokePort()}. */
  public Router invokeOnly(Vertx vertx) {
    Router r = base(vertx);
    invokeRoutes(r);
    return finish(r);
  }

  /** Everything but the invoke endpoints, when those have their own port. */
  public Router adminOnly(Vertx vertx) {
    Router r = base(vertx);
    adminRoutes(r);
    kserve.routes(r);
    return finish(r);
  }

  private Router base(Vertx vertx) {
    Router r = Router.router(vertx);
    r.route().handler(ctx -> {
      long start = System.nanoTime();
      ctx.put(Http.RECEIVED, start);
      ctx.addEndHandler(v -> {
        count(ctx);
        log(ctx, start);
        startupDone(ctx);
      });
      ctx.next();
    });
    r.route().handler(BodyHandler.create(false).setBodyLimit(options.maxBodyBytes()));
    return r;
  }

  private void invokeRoutes(Router r) {
    nativeApi.invoke(r);
    kserve.routes(r);
    openAi.routes(r);
  }

  private void adminRoutes(Router r) {
    nativeApi.admin(r);
    // Scraped off the event loop: the JVM binders' gauges and hundreds of functions' series take milliseconds.
    get(r, "/metrics").handler(ctx -> ctx.vertx().executeBlocking(() -> {
      processMetrics.bindProcess();
      return metrics.scrape();
    }, false).onComplete(ar -> {
      if (ar.failed()) {
        Http.sendError(ctx, ar.cause());
      } else {
        Http.end(ctx, ctx.response().putHeader("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
            Buffer.buffer(ar.result()));
      }
    }));
  }

  /** A route for GET and HEAD on {@code path}: HEAD answers as GET would, headers only ({@link Http#end}). */
  static Route get(Router router, String path) {
    return router.route(path).method(HttpMethod.GET).method(HttpMethod.HEAD);
  }

  private Router finish(Router r) {
    r.route().last().handler(ctx -> {
      if (OpenAiApi.owns(ctx.request().path())) {
        OpenAiApi.notFound(ctx);
        return;
      }
      Http.sendError(ctx, new ServeException(404, "not_found", "no endpoint " + ctx.request().method() + " "
          + ctx.request().path()));
    });
    r.errorHandler(413, ctx -> Http.sendError(ctx, new ServeException(413, "body_too_large",
        "the body exceeds " + options.maxBodyBytes() + " bytes (maxBodyBytes)")));
    r.errorHandler(500, ctx -> Http.sendError(ctx, ctx.failure() == null
        ? new ServeException(500, "internal_error", "internal error") : ctx.failure()));
    return r;
  }

  /**
   * Sends the server's own warm-up requests to {@code host:port} (see {@link HttpWarmup}); completes with their
   * statuses.
   */
  public java.util.concurrent.CompletableFuture<String> warmUp(String host, int port) {
    return warmup.start(host, port);
  }

  /** Writes the request log's last lines. */
  @Override
  public void close() {
    requestLog.close();
    processMetrics.close();
  }

  /** The first response a function gave ends the startup timeline: its line goes to the log. */
  private void startupDone(RoutingContext ctx) {
    Invocation inv = ctx.get(Http.INVOCATION);
    if (timeline == null || inv == null || ctx.response().getStatusCode() / 100 != 2) {
      return;
    }
    timeline.firstResponse(inv.function(), inv.phases()).ifPresent(line -> LOG.info(line + labels));
  }

  private void count(RoutingContext ctx) {
    if (warmup.isOwn(ctx.request().getHeader(HttpWarmup.HEADER))) {
      return;
    }
    if (ctx.response().closed() && !ctx.response().ended()) {
      processMetrics.abandoned();
    } else {
      processMetrics.responded(ctx.response().getStatusCode());
    }
  }

  private void log(RoutingContext ctx, long startNanos) {
    if (!requestLog.enabled() || warmup.isOwn(ctx.request().getHeader(HttpWarmup.HEADER))) {
      return;
    }
    double ms = (System.nanoTime() - startNanos) / 1e6;
    Invocation inv = ctx.get(Http.INVOCATION);
    // Built by hand, not by a formatter: this runs on the event loop after every request.
    StringBuilder line = new StringBuilder(160);
    line.append(ctx.request().method()).append(' ').append(ctx.request().path()).append(' ')
        .append(ctx.response().closed() && !ctx.response().ended() ? "closed" : ctx.response().getStatusCode())
        .append(' ');
    Invocation.appendMillis(line, ms).append("ms");
    if (inv != null) {
      line.append(' ').append(inv.function()).append(' ').append(inv.cold() ? "cold" : "warm");
      for (Map.Entry<String, Double> p : inv.phases().entrySet()) {
        Invocation.appendMillis(line.append(' ').append(p.getKey()).append('='), p.getValue());
      }
    } else if (ctx.get(Http.FUNCTION) != null) {
      line.append(' ').append((String) ctx.get(Http.FUNCTION));
    }
    line.append(labels);
    requestLog.add(line.toString());
  }
}
