package dev.thaw.server.impl;

import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.ServerOptions;
import dev.thaw.server.StartupTimeline;
import io.micrometer.core.instrument.Counter;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpMethod;
import io.vertx.ext.web.Route;
import io.vertx.core.http.HttpClosedException;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import io.vertx.ext.web.handler.BodyHandler;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The server's routes, on one router or split over two ports: the invoke endpoints (native invoke, KServe v2,
 * OpenAI's completions, chat and models, health) and the rest (admin API, function state and traces, metrics); and
 * for the node socket, the invoke endpoints, a function's state and tenant registration ({@link NodeApi}), never the
 * admin API or metrics. On every router a tenant's function answers only requests that carry its token. Every
 * request is bounded
 * ({@link ServerOptions#maxBodyBytes()}, {@link ServerOptions#maxJsonDepth()}) and logged in one line with its
 * phases.
 */
public final class Endpoints implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(ServerLogs.REQUESTS);
  /** The header a client may name its request with; {@link Http#REQUEST_ID_HEADER} answers with it. */
  static final String CLIENT_REQUEST_ID = "X-Request-Id";
  private static final String DISCONNECTED = "thaw.disconnected";
  private static final Pattern SANE_REQUEST_ID = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._:=+/-]{0,127}");

  private final ServerOptions options;
  private final PrometheusMeterRegistry metrics;
  private final ProcessMetrics processMetrics;
  private final NativeApi nativeApi;
  private final NodeApi nodeApi;
  private final KServeApi kserve;
  private final OpenAiApi openAi;
  private final String labels;
  private final RequestLog requestLog = new RequestLog(LOG);
  private final HttpWarmup warmup = new HttpWarmup();
  private final StartupTimeline timeline;
  private final String requestIdPrefix = Long.toString(ThreadLocalRandom.current().nextLong() >>> 1, 36) + "-";
  private final AtomicLong requestIds = new AtomicLong();
  private final Counter disconnects;

  /**
   * @param registrations how functions are registered (by the operator, and by tenants on the node socket)
   * @param timeline the process's way to its first response, logged with it; null for none
   */
  public Endpoints(ServerOptions options, Scheduler scheduler, Registrations registrations,
      PrometheusMeterRegistry metrics, String adminToken, StartupTimeline timeline) {
    this.timeline = timeline;
    this.options = options;
    this.metrics = metrics;
    this.processMetrics = new ProcessMetrics(metrics);
    this.disconnects = Counter.builder("thaw.http.disconnects")
        .description("Requests whose client closed the connection before the response was sent").register(metrics);
    Http http = new Http(options.maxJsonDepth());
    this.nativeApi = new NativeApi(scheduler, registrations, http, adminToken);
    this.nodeApi = new NodeApi(registrations, http, nativeApi::isAdmin);
    this.kserve = new KServeApi(scheduler, http);
    this.openAi = new OpenAiApi(scheduler, http);
    this.labels = options.labels().isEmpty() ? "" : " " + options.labels().entrySet().stream()
        .map(e -> e.getKey() + "=" + e.getValue()).collect(Collectors.joining(" "));
  }

  /** Every route on one router. */
  public Router all(Vertx vertx) {
    Router r = base(vertx);
    nodeApi.guard(r);
    invokeRoutes(r);
    adminRoutes(r);
    return finish(r);
  }

  /** The invoke endpoints only, for {@link ServerOptions#invokePort()}. */
  public Router invokeOnly(Vertx vertx) {
    Router r = base(vertx);
    nodeApi.guard(r);
    invokeRoutes(r);
    return finish(r);
  }

  /** Everything but the invoke endpoints, when those have their own port. */
  public Router adminOnly(Vertx vertx) {
    Router r = base(vertx);
    nodeApi.guard(r);
    adminRoutes(r);
    kserve.routes(r);
    return finish(r);
  }

  /**
   * The node socket's routes: the invoke endpoints, a function's state and traces, and tenant registration; a
   * tenant's function only with its token.
   */
  public Router node(Vertx vertx) {
    Router r = base(vertx);
    nodeApi.guard(r);
    nodeApi.registration(r);
    nativeApi.state(r);
    invokeRoutes(r);
    return finish(r);
  }

  private Router base(Vertx vertx) {
    Router r = Router.router(vertx);
    r.route().handler(ctx -> {
      long start = System.nanoTime();
      ctx.put(Http.RECEIVED, start);
      String id = requestId(ctx.request().getHeader(CLIENT_REQUEST_ID));
      ctx.put(Http.REQUEST_ID, id);
      ctx.response().putHeader(Http.REQUEST_ID_HEADER, id);
      ctx.addEndHandler(v -> {
        count(ctx);
        log(ctx, start);
        startupDone(ctx);
      });
      ctx.next();
    });
    // A client that leaves mid-request is ordinary traffic: counted and logged at debug, never an error.
    r.route().failureHandler(ctx -> {
      if (ctx.response().ended()) {
        return; // answered already (a body that came too late: 408), then its connection closed
      }
      Throwable failure = Http.unwrap(ctx.failure());
      // Reading the request is the only I/O a route does: an IOException there is the client's connection failing.
      if (ctx.response().closed() || failure instanceof HttpClosedException || failure instanceof IOException) {
        disconnected(ctx);
        LOG.debug("request {} {} {}: the client closed the connection", Http.requestId(ctx), ctx.request().method(),
            ctx.request().path());
        return;
      }
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
  public CompletableFuture<String> warmUp(String host, int port) {
    return warmup.start(host, port);
  }

  /** As {@link #warmUp(String, int)}, over the node socket. */
  public CompletableFuture<String> warmUp(Path socket) {
    return warmup.start(socket);
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

  /** The client's id for a request where it is sane (one short token a log line can hold), else a new one. */
  private String requestId(String given) {
    if (given != null && SANE_REQUEST_ID.matcher(given).matches()) {
      return given;
    }
    return requestIdPrefix + Long.toString(requestIds.incrementAndGet(), 36);
  }

  /** Counts a request whose client left before its response was sent, once. */
  private void disconnected(RoutingContext ctx) {
    if (ctx.get(DISCONNECTED) == null) {
      ctx.put(DISCONNECTED, Boolean.TRUE);
      disconnects.increment();
    }
  }

  private void log(RoutingContext ctx, long startNanos) {
    // The context ends with its response sent, or its connection gone: no response then is a client that left.
    if (!ctx.response().ended()) {
      disconnected(ctx);
    }
    boolean closed = ctx.get(DISCONNECTED) != null;
    if (!requestLog.enabled() || warmup.isOwn(ctx.request().getHeader(HttpWarmup.HEADER))) {
      return;
    }
    double ms = (System.nanoTime() - startNanos) / 1e6;
    Invocation inv = ctx.get(Http.INVOCATION);
    // Built by hand, not by a formatter: this runs on the event loop after every request.
    StringBuilder line = new StringBuilder(160);
    line.append(ctx.request().method()).append(' ').append(ctx.request().path()).append(' ')
        .append(closed ? "closed" : ctx.response().getStatusCode()).append(' ');
    Invocation.appendMillis(line, ms).append("ms id=").append(Http.requestId(ctx));
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
