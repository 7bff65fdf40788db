package dev.thaw.server;

import dev.thaw.image.store.ChunkStore;
import dev.thaw.server.impl.ColdPathWarmup;
import dev.thaw.server.impl.Connections;
import dev.thaw.server.impl.Endpoints;
import dev.thaw.server.impl.ImageInfo;
import dev.thaw.server.impl.ProcessMetrics;
import dev.thaw.server.impl.ImagePulls;
import dev.thaw.server.impl.Registrations;
import dev.thaw.server.impl.Scheduler;
import dev.thaw.server.spi.InstanceFactory;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.Future;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.net.SocketAddress;
import io.vertx.ext.web.Router;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ConnectException;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The restore server: Thaw's front door over HTTP. It serves functions from images in a store through a
 * {@link InstanceFactory} (instances in this process, or one per pooled worker process):
 * the native API ({@code /v1/functions}), the KServe Open Inference Protocol v2 ({@code /v2}), OpenAI-style
 * completions ({@code /v1/completions}) and Prometheus metrics ({@code /metrics}). {@code docs/design/server.md}
 * is the API reference.
 *
 * <p>It listens on TCP, on a Unix domain socket ({@link ServerOptions#socketPath()}: node mode, where the function
 * pods of a node register their functions and forward their requests), or both. A function's image is a tag in the
 * store or a registry reference, pulled into the store before the function serves.
 *
 * <p>Lifecycle: {@link #start} listens and registers {@link ServerOptions#functions()}; {@link #drain} refuses
 * new requests and lets queued and in-flight ones finish; {@link #close()} stops listening (and removes the socket
 * file), stops image pulls, evicts every instance and closes the factory. The store belongs to the caller.
 */
public final class ThawServer implements AutoCloseable {

  private static final int STALLED_SECONDS = 120;

  private final ServerOptions options;
  private final Vertx vertx;
  private final Scheduler scheduler;
  private final Registrations registrations;
  private final InstanceFactory factory;
  private final PrometheusMeterRegistry metrics;
  private final String adminToken;
  private final Path adminTokenFile;
  private final List<HttpServer> servers = new ArrayList<>();
  private final List<Connections> connections = new ArrayList<>();
  private Endpoints endpoints;
  private int port = ServerOptions.NO_PORT;
  private int invokePort = ServerOptions.NO_INVOKE_PORT;
  /** The socket file this server made, removed at close; null while none. */
  private Path socket;
  private boolean closed;
  private StartupTimeline timeline;
  private CompletableFuture<String> httpWarmup = CompletableFuture.completedFuture("not run");
  private CompletableFuture<String> coldPathWarmup = CompletableFuture.completedFuture("not run");

  private ThawServer(ServerOptions options, ChunkStore store, InstanceFactory factory, String adminToken,
      Path adminTokenFile, Vertx vertx) {
    this.options = new ServerOptions(options);
    this.factory = factory;
    this.adminToken = adminToken;
    this.adminTokenFile = adminTokenFile;
    // The labels (Knative's K_* among them) before any meter: a filter added later misses the meters made before it.
    this.metrics = ProcessMetrics.registry(options.labels());
    factory.bindMetrics(metrics);
    this.scheduler = new Scheduler(factory, metrics, options.gpuMemoryBytes(), options.retryAfter(),
        options.tracesKept(), options.wakeAhead());
    long retryAfterSeconds = Math.max(1, (options.retryAfter().toMillis() + 999) / 1000);
    this.registrations = Registrations.create(scheduler, store,
        new ImagePulls(store, options.registry(), options.maxPulls(), retryAfterSeconds), options.tenants());
    this.vertx = vertx != null ? vertx : Vertx.vertx();
  }

  /**
   * Starts a server: resolves the admin token, registers the configured functions (a tag's image must be in the
   * store; a registry reference is pulled in the background, and its function serves once it is in) and listens.
   * Blocks until it listens.
   *
   * @throws IllegalArgumentException if a configured function's image is missing or unusable, or the options name
   *     no listener (no port and no socket)
   * @throws UncheckedIOException if a port or the socket cannot be bound or the admin token cannot be written
   */
  public static ThawServer start(ServerOptions options, ChunkStore store, InstanceFactory factory) {
    return start(options, store, factory, null);
  }

  /**
   * {@link #start(ServerOptions, ChunkStore, InstanceFactory)}, marking its steps on {@code timeline} (null: none),
   * which also makes the line the request log gets at the first response.
   */
  public static ThawServer start(ServerOptions options, ChunkStore store, InstanceFactory factory,
      StartupTimeline timeline) {
    return start(options, store, factory, timeline, null);
  }

  /**
   * As {@link #start(ServerOptions, ChunkStore, InstanceFactory, StartupTimeline)}, on {@code vertx} (made ahead, on
   * another thread, by a caller in a hurry; closed with the server), or a new one when null.
   */
  public static ThawServer start(ServerOptions options, ChunkStore store, InstanceFactory factory,
      StartupTimeline timeline, Vertx vertx) {
    if (options.port() == ServerOptions.NO_PORT && options.socketPath() == null) {
      throw new IllegalArgumentException("no TCP port and no socket: the server would listen nowhere");
    }
    if (options.port() == ServerOptions.NO_PORT && options.invokePort() != ServerOptions.NO_INVOKE_PORT) {
      throw new IllegalArgumentException("an invoke port needs the main TCP port");
    }
    Path tokenFile = options.adminToken() == null && options.storePath() != null
        ? options.storePath().resolve(ServerOptions.ADMIN_TOKEN_FILE) : null;
    String token = options.adminToken() != null ? options.adminToken()
        : tokenFile != null ? readOrCreateToken(tokenFile) : newToken();
    ThawServer server = new ThawServer(options, store, factory, token, tokenFile, vertx);
    server.timeline = timeline;
    mark(timeline, "vertx");
    try {
      for (Map.Entry<String, FunctionOptions> f : options.functions().entrySet()) {
        server.registrations.registerAtStart(f.getKey(), f.getValue());
      }
      mark(timeline, "registered");
      // The server's part of a cold start, through a throwaway scheduler, beside the listen and the HTTP warm-up: a
      // Knative pod's first request may come as soon as the port is open.
      server.coldPathWarmup = ColdPathWarmup.start(factory.devices());
      server.coldPathWarmup.thenRun(() -> mark(timeline, "cold path warmed"));
      Endpoints endpoints = new Endpoints(options, server.scheduler, server.registrations, server.metrics, token,
          timeline);
      server.endpoints = endpoints;
      if (options.port() == ServerOptions.NO_PORT) {
        // Socket only.
      } else if (options.invokePort() == ServerOptions.NO_INVOKE_PORT) {
        server.port = server.listen(endpoints.all(server.vertx), options.port(), "http");
      } else {
        server.port = server.listen(endpoints.adminOnly(server.vertx), options.port(), "http");
        server.invokePort = server.listen(endpoints.invokeOnly(server.vertx), options.invokePort(), "invoke");
      }
      if (options.socketPath() != null) {
        server.listenOnSocket(endpoints.node(server.vertx), options.socketPath());
      }
      mark(timeline, "listening");
      String host = options.host().equals("0.0.0.0") || options.host().equals("::") ? "127.0.0.1" : options.host();
      server.httpWarmup = server.port == ServerOptions.NO_PORT ? endpoints.warmUp(server.socket)
          : endpoints.warmUp(host, options.invokePort() == ServerOptions.NO_INVOKE_PORT ? server.port
              : server.invokePort);
      server.httpWarmup.thenRun(() -> mark(timeline, "http warmed"));
      return server;
    } catch (RuntimeException | Error e) {
      server.close();
      throw e;
    }
  }

  private static void mark(StartupTimeline timeline, String event) {
    if (timeline != null) {
      timeline.mark(event);
    }
  }

  /**
   * The server's warm-up of its own HTTP path, sent once it listens (a health check and an invoke of an unknown
   * function, left out of the request log): completes with their statuses, e.g. {@code "200 404"}.
   */
  public CompletableFuture<String> httpWarmup() {
    return httpWarmup;
  }

  /**
   * The server's warm-up of its own part of a cold start ({@link ColdPathWarmup}), started once the configured
   * functions are registered: completes with the starts of its two requests through a throwaway scheduler,
   * {@code "cold warm"}.
   */
  public CompletableFuture<String> coldPathWarmup() {
    return coldPathWarmup;
  }

  /** The timeline this server was started with, or null. */
  public StartupTimeline startupTimeline() {
    return timeline;
  }

  /** Options every listener shares: bounded request heads, HTTP/1.1 only, a stalled connection closed. */
  private static HttpServerOptions httpOptions() {
    // Without a byte either way for this long, even a connection with a request in flight is closed: a client that
    // stopped reading its response. Heads, bodies and idle connections have the shorter deadlines of Connections.
    // HTTP/1.1 only: with cleartext HTTP/2 on, Vert.x makes a connection known only once its first request's head is
    // whole (to spot an h2c upgrade), and Connections could neither count nor time a head that never ends.
    return new HttpServerOptions().setMaxInitialLineLength(8192).setMaxHeaderSize(16384)
        .setIdleTimeout(STALLED_SECONDS).setIdleTimeoutUnit(TimeUnit.SECONDS).setHttp2ClearTextEnabled(false);
  }

  /**
   * Listens on {@code port} with the routes of {@code router}, its connections bounded and timed by a {@link
   * Connections} of their own ({@code listener} tags its metrics).
   */
  private int listen(Router router, int port, String listener) {
    Connections guard = new Connections(options, metrics, listener);
    connections.add(guard);
    HttpServer http = vertx.createHttpServer(httpOptions().setHost(options.host()).setPort(port))
        .connectionHandler(guard::opened).exceptionHandler(guard::failed).requestHandler(guard.tracking(router));
    try {
      HttpServer bound = await(http.listen());
      servers.add(bound);
      return bound.actualPort();
    } catch (ExecutionException e) {
      throw new UncheckedIOException(new IOException("cannot listen on " + options.host() + ":" + port + ": "
          + e.getCause().getMessage(), e.getCause()));
    }
  }

  /**
   * Listens on a Unix domain socket at {@code path} (Vert.x's NIO transport: JDK 16's {@code UnixDomainSocketAddress},
   * no native library), made readable and writable by everyone: who may reach a function is decided by its token,
   * not by the file. A socket file no server answers on (one that died) is replaced; a live one, or a file that is not
   * a socket, is refused.
   */
  private void listenOnSocket(Router router, Path path) {
    try {
      Path parent = path.toAbsolutePath().getParent();
      if (parent != null) {
        Files.createDirectories(parent);
      }
      if (Files.exists(path, LinkOption.NOFOLLOW_LINKS)) {
        BasicFileAttributes a = Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        if (!a.isOther()) {
          throw new IOException("it exists and is not a socket");
        }
        try (SocketChannel probe = SocketChannel.open(UnixDomainSocketAddress.of(path))) {
          throw new IOException("another server listens on it");
        } catch (ConnectException stale) {
          Files.delete(path);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(new IOException("cannot listen on the socket " + path + ": " + e.getMessage(),
          e));
    }
    HttpServer http = vertx.createHttpServer(httpOptions()).requestHandler(router);
    try {
      servers.add(await(http.listen(SocketAddress.domainSocketAddress(path.toString()))));
      socket = path;
      Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("rw-rw-rw-"));
    } catch (ExecutionException e) {
      throw new UncheckedIOException(new IOException("cannot listen on the socket " + path + ": "
          + e.getCause().getMessage(), e.getCause()));
    } catch (IOException e) {
      throw new UncheckedIOException("cannot open the socket " + path + " to everyone: " + e.getMessage(), e);
    }
  }

  /** The Unix domain socket this server listens on, or null. */
  public Path socketPath() {
    return socket;
  }

  /**
   * The port every endpoint is on (the admin endpoints only, with {@link #invokePort()}); {@link ServerOptions#NO_PORT}
   * for none.
   */
  public int port() {
    return port;
  }

  /** The invoke endpoints' own port, or {@link ServerOptions#NO_INVOKE_PORT}. */
  public int invokePort() {
    return invokePort;
  }

  /** {@code http://host:port}, or {@code unix:PATH} when it listens on a socket only. */
  public String url() {
    if (port == ServerOptions.NO_PORT) {
      return "unix:" + socket;
    }
    return "http://" + (options.host().contains(":") ? "[" + options.host() + "]" : options.host()) + ":" + port;
  }

  public String adminToken() {
    return adminToken;
  }

  /** Where the admin token is kept, or null when it was given or is this process's own. */
  public Path adminTokenFile() {
    return adminTokenFile;
  }

  public String instances() {
    return factory.name();
  }

  /** True once every function can serve, and until the server drains: {@code /v2/health/ready}. */
  public boolean ready() {
    return scheduler.ready();
  }

  /** Instances alive now (starting ones included), across all functions. */
  public int instanceCount() {
    return scheduler.instanceCount();
  }

  /**
   * Stops taking requests (new ones get 503 and readiness turns false) and waits until every queued and in-flight
   * request has finished, or {@code timeout}.
   *
   * @return true if everything finished in time
   */
  public boolean drain(Duration timeout) {
    try {
      scheduler.drain().get(timeout.toMillis(), TimeUnit.MILLISECONDS);
      return true;
    } catch (TimeoutException e) {
      return false;
    } catch (ExecutionException e) {
      return false;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /** Stops listening, evicts every instance and closes the factory. Idempotent. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    connections.forEach(Connections::close);
    for (HttpServer s : servers) {
      try {
        await(s.close());
      } catch (ExecutionException e) {
        // Closing anyway.
      }
    }
    if (socket != null) {
      try {
        Files.deleteIfExists(socket);
      } catch (IOException e) {
        // The next server replaces a stale socket file.
      }
    }
    if (endpoints != null) {
      endpoints.close();
    }
    registrations.close();
    scheduler.close();
    factory.close();
    try {
      await(vertx.close());
    } catch (ExecutionException e) {
      // The event loops stop regardless.
    }
    metrics.close();
  }

  private static <T> T await(Future<T> f) throws ExecutionException {
    try {
      return f.toCompletionStage().toCompletableFuture().get(60, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ExecutionException(e);
    } catch (TimeoutException e) {
      throw new ExecutionException(e);
    }
  }

  static String newToken() {
    byte[] b = new byte[32];
    new SecureRandom().nextBytes(b);
    return Base64.getUrlEncoder().withoutPadding().encodeToString(b);
  }

  /** The token in {@code file}; made (mode 0600, created that way, never widened) when there is none. */
  static String readOrCreateToken(Path file) {
    try {
      if (!Files.exists(file)) {
        String token = newToken();
        try {
          Files.createFile(file, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
          Files.writeString(file, token + "\n", StandardCharsets.UTF_8);
          return token;
        } catch (FileAlreadyExistsException raced) {
          // Another server made it first: read theirs.
        }
      }
      String token = Files.readString(file, StandardCharsets.UTF_8).trim();
      if (token.length() < 16) {
        throw new UncheckedIOException(new IOException("the admin token in " + file + " is shorter than 16 characters"));
      }
      return token;
    } catch (IOException e) {
      throw new UncheckedIOException("cannot read or create the admin token " + file + ": " + e.getMessage(), e);
    }
  }
}
