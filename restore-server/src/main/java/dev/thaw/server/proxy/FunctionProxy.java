package dev.thaw.server.proxy;

import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.thaw.runtime.host.Threads;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Node mode's function pod: a thin, GPU-less proxy in front of the node server (a {@code thaw serve --socket} that
 * owns the node's GPUs). At start it listens, and registers its function with the server through the server's Unix
 * socket (its name, its image's registry reference, its options, with the tenant key), which answers with the
 * function's token; then it forwards its function's routes — native invoke and state, KServe v2, OpenAI completions —
 * to the server with that token, and nothing else.
 *
 * <p>Readiness ({@code /v2/health/ready}) is the function's, asked of the server ({@code /v2/models/{name}}): ready
 * once the server serves it (registered, its image pulled), whether or not an instance or an idle worker is there
 * this moment — a request waits for those, and a pod taken out of service each time the pool refills would send its
 * traffic back to Knative's activator. Liveness ({@code /v2/health/live}) is the proxy's own, so a restarting node
 * server does not get the pods restarted. When the server has forgotten the function (it
 * restarted), the proxy registers it again and sends the request again once; when the server cannot be reached, a
 * request gets 502 {@code node_unreachable} and registration is retried, never waited for. A registration the server
 * refuses for good (a name another tenant holds, a limit, a bad reference) completes {@link #refused()}. A pull that
 * failed is registered again (which retries it) after 10 s, then less often.
 *
 * <p>On {@link #drain}: readiness turns false, new requests get 503 {@code draining}, those in flight finish.
 *
 * <p>JDK only ({@code com.sun.net.httpserver} in front, {@link NodeClient} behind): no HTTP or JSON library loads,
 * so the proxy is ready in a fraction of a second and a few tens of MiB.
 */
public final class FunctionProxy implements AutoCloseable {

  /** The proxy's log: its registrations, and why the node server refused or could not be reached. */
  public static final String LOG_NAME = "dev.thaw.proxy";
  private static final Logger LOG = LoggerFactory.getLogger(LOG_NAME);
  /** The server's headers for a tenant's key and its function's token (restore-server's {@code Tenants}). */
  static final String KEY_HEADER = "Thaw-Function-Key";
  static final String TOKEN_HEADER = "Thaw-Function-Token";
  /** Request bodies up to this size are kept, so a request can be sent again after registering again. */
  static final int REPLAYABLE_BYTES = 64 << 10;
  private static final Duration MAX_RETRY = Duration.ofSeconds(5);
  private static final Duration FIRST_PULL_RETRY = Duration.ofSeconds(10);
  private static final Duration MAX_PULL_RETRY = Duration.ofMinutes(5);
  /** Hop-by-hop headers, and those the proxy sets itself: never passed on. */
  private static final Set<String> DROPPED = Set.of("connection", "keep-alive", "proxy-connection", "te", "trailer",
      "transfer-encoding", "upgrade", "host", "content-length", "expect", "authorization",
      KEY_HEADER.toLowerCase(Locale.ROOT), TOKEN_HEADER.toLowerCase(Locale.ROOT), "thaw-warmup");

  private final ProxyOptions options;
  private final NodeClient node;
  private final HttpServer http;
  private final ThreadPoolExecutor workers;
  private final Map<String, String> routes;
  private final CompletableFuture<String> refused = new CompletableFuture<>();
  private final AtomicInteger inFlight = new AtomicInteger();
  private final Object registering = new Object();
  private volatile String token;
  private volatile String waiting = "not registered with the node server yet";
  private volatile boolean draining;
  private volatile boolean closed;
  private volatile long pullRetryAtNanos;
  private Duration pullRetry = FIRST_PULL_RETRY;
  private Thread registrar;

  private FunctionProxy(ProxyOptions options, HttpServer http, ThreadPoolExecutor workers) {
    this.options = options;
    this.node = new NodeClient(options.socket());
    this.http = http;
    this.workers = workers;
    String f = options.function();
    // Decoded path -> the methods it answers: the function's own routes, and nothing of any other function.
    this.routes = Map.of("/v1/functions/" + f + "/invoke", "POST", "/v1/functions/" + f, "GET",
        "/v1/functions/" + f + "/trace", "GET", "/v2/models/" + f, "GET", "/v2/models/" + f + "/ready", "GET",
        "/v2/models/" + f + "/infer", "POST", "/v1/completions", "POST", "/v2", "GET");
  }

  /**
   * Listens and starts registering the function with the node server (in the background: the server may not be up).
   *
   * @throws IllegalArgumentException if the options are incomplete
   * @throws UncheckedIOException if the port cannot be bound
   */
  public static FunctionProxy start(ProxyOptions options) {
    options.validate();
    // A thread per request in flight, made only when none is idle (a pool of fixed size would make one per request
    // until it is full: 30 MiB of stacks after a few hundred requests), up to maxConcurrency.
    ThreadPoolExecutor workers = new ThreadPoolExecutor(0, options.maxConcurrency(), 30, TimeUnit.SECONDS,
        new SynchronousQueue<>(), Threads.daemonFactory("thaw-proxy"));
    // Its answers go out at once: with Nagle's algorithm on, a response written in two parts (head, body) waits for
    // the client's delayed acknowledgement of the first, ~40 ms.
    System.setProperty("sun.net.httpserver.nodelay", "true");
    HttpServer http;
    try {
      http = HttpServer.create(new InetSocketAddress(options.host(), options.port()), 128);
    } catch (IOException e) {
      workers.shutdown();
      throw new UncheckedIOException("cannot listen on " + options.host() + ":" + options.port() + ": "
          + e.getMessage(), e);
    }
    FunctionProxy p = new FunctionProxy(options, http, workers);
    http.createContext("/", p::handle);
    http.setExecutor(workers);
    http.start();
    p.registrar = Threads.startDaemon(p::registerUntilDone, "thaw-proxy-register");
    return p;
  }

  /** The port it listens on. */
  public int port() {
    return http.getAddress().getPort();
  }

  /** True once the function is registered with the node server (whether or not its image is in yet). */
  public boolean registered() {
    return token != null;
  }

  /** Completes with the node server's reason when it refused the registration for good: the proxy cannot serve. */
  public CompletableFuture<String> refused() {
    return refused;
  }

  // ---- registration ----

  private void registerUntilDone() {
    long waitNanos = options.retry().toNanos();
    String lastProblem = null;
    while (!closed && !refused.isDone()) {
      try {
        if (register()) {
          return;
        }
      } catch (IOException e) {
        String problem = "the node server cannot be reached at " + options.socket() + ": " + e.getMessage();
        waiting = problem;
        if (!problem.equals(lastProblem)) {
          LOG.warn("{}; registering {} again in the background", problem, options.function());
          lastProblem = problem;
        }
      }
      try {
        TimeUnit.NANOSECONDS.sleep(waitNanos);
      } catch (InterruptedException e) {
        return;
      }
      waitNanos = Math.min(waitNanos * 2, MAX_RETRY.toNanos());
    }
  }

  /**
   * Registers the function once: true when the server took it (the token is set) or refused it for good
   * ({@link #refused} completed); false when it failed for now (a 5xx).
   */
  private boolean register() throws IOException {
    synchronized (registering) {
      StringBuilder body = new StringBuilder("{\"image\": ").append(quote(options.image()));
      options.functionOptions().forEach((k, v) -> body.append(", ").append(quote(k)).append(": ")
          .append(k.equals("keepAlive") ? quote(v) : v));
      body.append('}');
      List<String[]> headers = List.of(new String[] {KEY_HEADER, options.tenantKey()},
          new String[] {"Content-Type", "application/json"});
      try (NodeClient.Response r = node.send(new NodeClient.Request("PUT", "/v1/functions/" + options.function(),
          headers, body.toString().getBytes(StandardCharsets.UTF_8)))) {
        String answer = r.text();
        if (r.status == 200 || r.status == 201 || r.status == 202) {
          token = r.header(TOKEN_HEADER);
          waiting = r.status == 202 ? "its image is being pulled" : null;
          LOG.info("{} registered with the node server ({}): {}", options.function(), r.status,
              r.status == 202 ? "its image " + options.image() + " is being pulled" : "serving " + options.image());
          return true;
        }
        if (r.status / 100 == 4) {
          String why = "the node server refused to register " + options.function() + " (" + r.status + "): "
              + answer;
          waiting = why;
          LOG.error(why);
          refused.complete(why);
          return true;
        }
        waiting = "the node server could not register the function (" + r.status + "): " + answer;
        LOG.warn(waiting);
        return false;
      }
    }
  }

  /**
   * The server no longer knows the function its request named (it restarted, or the function was deleted): registers
   * it again, unless another thread did since {@code stale} was the token.
   */
  private boolean registerAgain(String stale) {
    synchronized (registering) {
      if (token != null && !token.equals(stale)) {
        return true;
      }
      token = null;
      try {
        if (register() && token != null) {
          return true;
        }
      } catch (IOException e) {
        waiting = "the node server cannot be reached at " + options.socket() + ": " + e.getMessage();
      }
    }
    return false;
  }

  // ---- requests ----

  private void handle(HttpExchange ex) throws IOException {
    try (ex) {
      String path = ex.getRequestURI().getPath();
      String method = ex.getRequestMethod();
      if (path.equals("/v2/health/live") && method.equals("GET")) {
        send(ex, 200, "{\"live\": true}");
        return;
      }
      if (path.equals("/v2/health/ready") && method.equals("GET")) {
        readiness(ex);
        return;
      }
      if (!method.equals(routes.get(path))) {
        send(ex, 404, error("no endpoint " + method + " " + path + " on the proxy of function '"
            + options.function() + "'", "not_found"));
        return;
      }
      inFlight.incrementAndGet();
      try {
        if (draining) {
          ex.getResponseHeaders().add("Retry-After", "1");
          send(ex, 503, error("the proxy is shutting down", "draining"));
          return;
        }
        forward(ex, path);
      } finally {
        if (inFlight.decrementAndGet() == 0 && draining) {
          synchronized (inFlight) {
            inFlight.notifyAll();
          }
        }
      }
    }
  }

  private void forward(HttpExchange ex, String path) throws IOException {
    String t = token;
    if (t == null) {
      ex.getResponseHeaders().add("Retry-After", "1");
      send(ex, 503, error("function '" + options.function() + "' is not registered with the node server yet: "
          + waiting, "not_registered"));
      return;
    }
    String target = ex.getRequestURI().getRawPath()
        + (ex.getRequestURI().getRawQuery() == null ? "" : "?" + ex.getRequestURI().getRawQuery());
    List<String[]> headers = new ArrayList<>();
    for (Map.Entry<String, List<String>> h : ex.getRequestHeaders().entrySet()) {
      if (!DROPPED.contains(h.getKey().toLowerCase(Locale.ROOT))) {
        for (String v : h.getValue()) {
          headers.add(new String[] {h.getKey(), v});
        }
      }
    }
    String declared = ex.getRequestHeaders().getFirst("Content-Length");
    long length = declared != null ? parseLength(declared) : -1;
    InputStream in = ex.getRequestBody();
    byte[] head = in.readNBytes(REPLAYABLE_BYTES);
    boolean whole = length >= 0 ? head.length == length : head.length < REPLAYABLE_BYTES;
    if (whole) {
      length = head.length;
    }
    // Only the native and KServe routes name the function in the path: a 404 there means the server forgot it.
    boolean mayReregister = whole && !path.equals("/v1/completions") && !path.equals("/v2");
    for (int attempt = 0; ; attempt++) {
      List<String[]> sent = new ArrayList<>(headers);
      sent.add(new String[] {TOKEN_HEADER, t});
      NodeClient.Response r;
      try {
        r = node.send(ex.getRequestMethod(), target, sent, head, whole ? null : in, length);
      } catch (IOException e) {
        ex.getResponseHeaders().add("Retry-After", "1");
        send(ex, 502, error("the node server cannot be reached at " + options.socket() + ": " + e.getMessage(),
            "node_unreachable"));
        return;
      }
      try (r) {
        if (r.status == 404 && mayReregister && attempt == 0) {
          String answer = r.text();
          if (answer.contains("\"function_not_found\"") && registerAgain(t)) {
            t = token;
            continue;
          }
          relay(ex, r, answer.getBytes(StandardCharsets.UTF_8));
          return;
        }
        relay(ex, r, null);
        return;
      }
    }
  }

  /** The server's response, as it is: status, headers (less hop-by-hop ones), body as it arrives. */
  private static void relay(HttpExchange ex, NodeClient.Response r, byte[] read) throws IOException {
    Headers out = ex.getResponseHeaders();
    for (String[] h : r.headers) {
      String k = h[0].toLowerCase(Locale.ROOT);
      if (!k.equals("content-length") && !k.equals("transfer-encoding") && !k.equals("connection")
          && !k.equals("keep-alive") && !k.equals("date")) {
        out.add(h[0], h[1]);
      }
    }
    if (read != null) {
      ex.sendResponseHeaders(r.status, read.length == 0 ? -1 : read.length);
      ex.getResponseBody().write(read);
      return;
    }
    long length = r.length();
    ex.sendResponseHeaders(r.status, length == 0 ? -1 : length > 0 ? length : 0);
    if (length == 0) {
      return;
    }
    OutputStream body = ex.getResponseBody();
    InputStream in = r.body();
    byte[] buf = new byte[16 << 10];
    for (int n = in.read(buf); n >= 0; n = in.read(buf)) {
      body.write(buf, 0, n);
      if (length < 0 && in.available() == 0) {
        // A chunked answer (server-sent events) goes on as each chunk arrives.
        body.flush();
      }
    }
  }

  private void readiness(HttpExchange ex) throws IOException {
    if (draining) {
      send(ex, 503, "{\"ready\": false, \"reason\": \"draining\"}");
      return;
    }
    String t = token;
    if (t == null) {
      send(ex, 503, "{\"ready\": false, \"reason\": " + quote(refused.isDone() ? refused.join() : waiting) + "}");
      return;
    }
    List<String[]> headers = List.<String[]>of(new String[] {TOKEN_HEADER, t});
    String answer;
    int status;
    try (NodeClient.Response r = node.send(new NodeClient.Request("GET", "/v2/models/" + options.function(), headers,
        new byte[0]))) {
      status = r.status;
      answer = r.text();
    } catch (IOException e) {
      send(ex, 503, "{\"ready\": false, \"reason\": " + quote("the node server cannot be reached at "
          + options.socket() + ": " + e.getMessage()) + "}");
      return;
    }
    if (status == 200) {
      pullRetry = FIRST_PULL_RETRY;
      send(ex, 200, "{\"ready\": true}");
      return;
    }
    if (status == 404 && answer.contains("\"function_not_found\"")) {
      workers.execute(() -> registerAgain(t));
      answer = "{\"ready\": false, \"reason\": \"the node server does not know the function (it restarted?): "
          + "registering it again\"}";
    } else if (status == 502 && answer.contains("\"image_pull_failed\"")) {
      retryPullLater();
    }
    send(ex, 503, answer);
  }

  /** A failed pull is retried by registering again, after 10 s, then at most every 5 min. */
  private void retryPullLater() {
    synchronized (registering) {
      long now = System.nanoTime();
      if (pullRetryAtNanos == 0) {
        pullRetryAtNanos = now + pullRetry.toNanos();
        return;
      }
      if (now - pullRetryAtNanos < 0) {
        return;
      }
      pullRetryAtNanos = 0;
      Duration doubled = pullRetry.multipliedBy(2);
      pullRetry = doubled.compareTo(MAX_PULL_RETRY) > 0 ? MAX_PULL_RETRY : doubled;
    }
    LOG.info("{}: registering again to retry its image's pull", options.function());
    workers.execute(() -> {
      try {
        register();
      } catch (IOException e) {
        waiting = "the node server cannot be reached at " + options.socket() + ": " + e.getMessage();
      }
    });
  }

  private static long parseLength(String declared) throws IOException {
    try {
      long n = Long.parseLong(declared.trim());
      if (n < 0) {
        throw new IOException("negative Content-Length");
      }
      return n;
    } catch (NumberFormatException e) {
      throw new IOException("bad Content-Length: " + declared, e);
    }
  }

  private static void send(HttpExchange ex, int status, String json) throws IOException {
    byte[] b = json.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/json");
    ex.sendResponseHeaders(status, b.length);
    ex.getResponseBody().write(b);
  }

  private static String error(String message, String code) {
    return "{\"error\": " + quote(message) + ", \"code\": " + quote(code) + "}";
  }

  /** {@code s} as a JSON string. */
  static String quote(String s) {
    StringBuilder b = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }

  // ---- shutdown ----

  /**
   * Turns readiness false, answers new requests 503 and waits until the requests in flight are done, or
   * {@code timeout}.
   *
   * @return true if they all finished in time
   */
  public boolean drain(Duration timeout) {
    draining = true;
    long until = System.nanoTime() + timeout.toNanos();
    synchronized (inFlight) {
      while (inFlight.get() > 0) {
        long left = until - System.nanoTime();
        if (left <= 0) {
          return false;
        }
        try {
          TimeUnit.NANOSECONDS.timedWait(inFlight, left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return false;
        }
      }
    }
    return true;
  }

  /** Stops listening and closes its connections to the node server. The function stays registered there. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    if (registrar != null) {
      registrar.interrupt();
    }
    http.stop(0);
    workers.shutdownNow();
    node.close();
  }
}
