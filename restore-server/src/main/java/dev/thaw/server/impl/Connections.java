package dev.thaw.server.impl;

import dev.thaw.server.ServerOptions;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.vertx.core.Context;
import io.vertx.core.Handler;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpClosedException;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The connections of one listening port, bounded and timed: at most {@link ServerOptions#maxConnections()} open, a
 * new one's request head within {@link ServerOptions#headerTimeout()}, a request's body within {@link
 * ServerOptions#bodyTimeout()} of its head, a kept-alive connection's next request within {@link
 * ServerOptions#idleTimeout()}. A connection over the limit closes the oldest open one that has no request in flight
 * (its head still coming, or idle between requests), else itself: connections that never finish a request cannot
 * hold the port's file descriptors, and a health check or an invoke still gets in. A connection with a request in
 * flight is never closed for another, nor timed out while its function runs.
 *
 * <p>Its handlers run on the server's event loop, where it sweeps its connections a few times per shortest timeout.
 * Metrics, tagged {@code listener}: {@code thaw_http_connections} (open now) and {@code
 * thaw_http_connections_closed_total{reason}} ({@code evicted}, {@code refused}, {@code header_timeout}, {@code
 * body_timeout}, {@code idle_timeout}).
 */
public final class Connections implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(Connections.class);

  private final int max;
  private final long headerNanos;
  private final long bodyNanos;
  private final long idleNanos;
  private final long sweepMillis;
  /** In the order they opened; guarded by this. */
  private final Map<HttpConnection, Tracked> open = new LinkedHashMap<>();
  private volatile int count;
  private final Counter evicted;
  private final Counter refused;
  private final Counter headerTimeouts;
  private final Counter bodyTimeouts;
  private final Counter idleTimeouts;
  private Vertx vertx;
  private long timer = -1;
  private boolean closed;

  /** One connection: when it opened, its latest request and when that came, when it went idle after it. */
  private static final class Tracked {
    final HttpConnection connection;
    final long openedNanos;
    HttpServerRequest request;
    long requestNanos;
    long idleSinceNanos;

    Tracked(HttpConnection connection, long openedNanos) {
      this.connection = connection;
      this.openedNanos = openedNanos;
    }

    boolean inFlight() {
      if (request == null) {
        return false;
      }
      HttpServerResponse r = request.response();
      return !r.ended() && !r.closed();
    }
  }

  /** @param listener the {@code listener} tag of its metrics: which port it guards */
  public Connections(ServerOptions options, MeterRegistry metrics, String listener) {
    this.max = options.maxConnections();
    this.headerNanos = options.headerTimeout().toNanos();
    this.bodyNanos = options.bodyTimeout().toNanos();
    this.idleNanos = options.idleTimeout().toNanos();
    long shortest = Math.min(headerNanos, Math.min(bodyNanos, idleNanos));
    this.sweepMillis = Math.max(25, Math.min(1000, TimeUnit.NANOSECONDS.toMillis(shortest) / 4));
    Gauge.builder("thaw.http.connections", this, c -> c.count).tag("listener", listener)
        .description("Connections open now").register(metrics);
    this.evicted = closedCounter(metrics, listener, "evicted");
    this.refused = closedCounter(metrics, listener, "refused");
    this.headerTimeouts = closedCounter(metrics, listener, "header_timeout");
    this.bodyTimeouts = closedCounter(metrics, listener, "body_timeout");
    this.idleTimeouts = closedCounter(metrics, listener, "idle_timeout");
  }

  private static Counter closedCounter(MeterRegistry metrics, String listener, String reason) {
    return Counter.builder("thaw.http.connections.closed").tag("listener", listener).tag("reason", reason)
        .description("Connections the server closed: to make room, over the limit, or timed out").register(metrics);
  }

  /** The server's connection handler: tracks {@code c}, making room for it or closing it when the port is full. */
  public void opened(HttpConnection c) {
    HttpConnection evict = null;
    boolean refuse = false;
    synchronized (this) {
      if (closed) {
        refuse = true;
      } else {
        startSweeping();
        if (open.size() >= max) {
          evict = oldestIdle();
          if (evict == null) {
            refuse = true;
          } else {
            open.remove(evict);
          }
        }
        if (!refuse) {
          open.put(c, new Tracked(c, System.nanoTime()));
          count = open.size();
        }
      }
    }
    if (evict != null) {
      evicted.increment();
      evict.close();
    }
    if (refuse) {
      refused.increment();
      c.close();
      return;
    }
    c.closeHandler(v -> forget(c));
  }

  /**
   * The server's exception handler: a connection that fails outside a request (reset while idle, say) is a client
   * going away, ordinary traffic: logged at debug, never as an error.
   */
  public void failed(Throwable e) {
    if (e instanceof IOException || e instanceof HttpClosedException) {
      LOG.debug("a connection failed: {}", e.toString());
    } else {
      LOG.warn("a connection failed", e);
    }
  }

  /** {@code next}, first noting each request on its connection. */
  public Handler<HttpServerRequest> tracking(Handler<HttpServerRequest> next) {
    return request -> {
      requestArrived(request);
      next.handle(request);
    };
  }

  private synchronized void requestArrived(HttpServerRequest request) {
    Tracked t = open.get(request.connection());
    if (t != null) {
      t.request = request;
      t.requestNanos = System.nanoTime();
      t.idleSinceNanos = 0;
    }
  }

  private synchronized void forget(HttpConnection c) {
    open.remove(c);
    count = open.size();
  }

  /** The connection that has been open longest without a request in flight, or null. */
  private HttpConnection oldestIdle() {
    for (Tracked t : open.values()) {
      if (!t.inFlight()) {
        return t.connection;
      }
    }
    return null;
  }

  private void startSweeping() {
    if (timer >= 0) {
      return;
    }
    Context context = Vertx.currentContext();
    vertx = context.owner();
    // Set from the connection handler, the timer fires on the same event loop as the connections' handlers.
    timer = vertx.setPeriodic(sweepMillis, id -> sweep());
  }

  /** Closes the connections whose head, body or next request is overdue. */
  void sweep() {
    long now = System.nanoTime();
    List<Tracked> headerLate = new ArrayList<>();
    List<Tracked> bodyLate = new ArrayList<>();
    List<Tracked> idle = new ArrayList<>();
    synchronized (this) {
      for (Iterator<Tracked> it = open.values().iterator(); it.hasNext(); ) {
        Tracked t = it.next();
        List<Tracked> late = null;
        if (t.request == null) {
          late = now - t.openedNanos > headerNanos ? headerLate : null;
        } else if (t.inFlight()) {
          // The function's own time never counts: only a body that has not arrived whole.
          late = !t.request.isEnded() && now - t.requestNanos > bodyNanos ? bodyLate : null;
        } else if (t.idleSinceNanos == 0) {
          t.idleSinceNanos = now;
        } else if (now - t.idleSinceNanos > idleNanos) {
          late = idle;
        }
        if (late != null) {
          late.add(t);
          it.remove();
        }
      }
      count = open.size();
    }
    headerLate.forEach(t -> t.connection.close());
    headerTimeouts.increment(headerLate.size());
    idle.forEach(t -> t.connection.close());
    idleTimeouts.increment(idle.size());
    for (Tracked t : bodyLate) {
      HttpServerResponse r = t.request.response();
      if (!r.headWritten()) {
        String id = r.headers().get(Http.REQUEST_ID_HEADER);
        r.setStatusCode(408).putHeader("Connection", "close").putHeader("Content-Type", Http.JSON)
            .end("{\"error\":\"the request's body did not arrive within " + TimeUnit.NANOSECONDS.toMillis(bodyNanos)
                + " ms\",\"code\":\"body_timeout\",\"requestId\":\"" + (id == null ? "-" : id) + "\"}")
            .onComplete(done -> t.connection.close());
      } else {
        t.connection.close();
      }
    }
    bodyTimeouts.increment(bodyLate.size());
  }

  /** Connections open now. */
  public int count() {
    return count;
  }

  /** Stops sweeping; the server closes the connections. Idempotent. */
  @Override
  public synchronized void close() {
    closed = true;
    if (timer >= 0) {
      vertx.cancelTimer(timer);
      timer = -1;
    }
  }
}
