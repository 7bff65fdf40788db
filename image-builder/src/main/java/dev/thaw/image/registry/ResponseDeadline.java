package dev.thaw.image.registry;

import dev.thaw.runtime.host.Threads;
import java.io.FilterInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.SSLSession;

/**
 * A response whose body has deadlines: {@link RegistryOptions#readTimeout()} between bytes and {@link
 * RegistryOptions#requestTimeout()} for the whole request. {@code java.net.http} bounds only the wait for a response's
 * head; a registry that stops sending mid-body would block a read forever. A watchdog closes a body whose deadline
 * passed, which ends the read blocked on it; the read then fails with {@link HttpTimeoutException}, an {@link
 * IOException} the client retries as a lost connection.
 */
final class ResponseDeadline {

  private static final ScheduledExecutorService WATCHDOG =
      Executors.newSingleThreadScheduledExecutor(Threads.daemonFactory("thaw-registry-deadlines"));

  private ResponseDeadline() {}

  /** {@code response} with its body under the deadlines, counted from {@code startNanos} for the whole request. */
  static HttpResponse<InputStream> of(HttpResponse<InputStream> response, long startNanos, RegistryOptions options) {
    return new Timed(response, new Body(response.body(), startNanos, options.readTimeout(), options.requestTimeout()));
  }

  /** A body that fails its reads once the registry went silent for the read timeout, or the request ran too long. */
  static final class Body extends FilterInputStream {
    private final long readTimeoutNanos;
    private final long deadlineNanos;
    private final Duration requestTimeout;
    private final ScheduledFuture<?> watch;
    private volatile long lastByteNanos;
    private volatile String expired;

    Body(InputStream in, long startNanos, Duration readTimeout, Duration requestTimeout) {
      super(in);
      this.readTimeoutNanos = readTimeout.toNanos();
      this.deadlineNanos = startNanos + requestTimeout.toNanos();
      this.requestTimeout = requestTimeout;
      this.lastByteNanos = System.nanoTime();
      long period = Math.max(TimeUnit.MILLISECONDS.toNanos(5), Math.min(TimeUnit.SECONDS.toNanos(1),
          readTimeoutNanos / 4));
      this.watch = WATCHDOG.scheduleAtFixedRate(this::check, period, period, TimeUnit.NANOSECONDS);
    }

    private void check() {
      long now = System.nanoTime();
      if (now - lastByteNanos > readTimeoutNanos) {
        expire("the registry sent nothing for " + TimeUnit.NANOSECONDS.toMillis(readTimeoutNanos) + " ms");
      } else if (now - deadlineNanos > 0) {
        expire("the request took longer than " + requestTimeout.toMillis() + " ms");
      }
    }

    private void expire(String why) {
      expired = why;
      watch.cancel(false);
      try {
        in.close();
      } catch (IOException e) {
        // Closed all the same as far as the reader is concerned: its read fails next.
      }
    }

    @Override
    public int read() throws IOException {
      int b;
      try {
        b = in.read();
      } catch (IOException e) {
        throw failure(e);
      }
      return progress(b < 0 ? -1 : 1) < 0 ? -1 : b;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      int n;
      try {
        n = in.read(b, off, len);
      } catch (IOException e) {
        throw failure(e);
      }
      return progress(n);
    }

    private int progress(int n) throws IOException {
      if (expired != null) {
        throw new HttpTimeoutException(expired);
      }
      if (n > 0) {
        lastByteNanos = System.nanoTime();
      } else if (n < 0) {
        watch.cancel(false); // the whole body came: nothing left to time
      }
      return n;
    }

    private IOException failure(IOException e) {
      String why = expired;
      if (why == null) {
        return e;
      }
      HttpTimeoutException t = new HttpTimeoutException(why);
      t.initCause(e);
      return t;
    }

    @Override
    public void close() throws IOException {
      watch.cancel(false);
      in.close();
    }
  }

  /** The response as it came, but for its body. */
  private record Timed(HttpResponse<InputStream> response, InputStream body) implements HttpResponse<InputStream> {
    @Override
    public int statusCode() {
      return response.statusCode();
    }

    @Override
    public HttpRequest request() {
      return response.request();
    }

    @Override
    public Optional<HttpResponse<InputStream>> previousResponse() {
      return response.previousResponse();
    }

    @Override
    public HttpHeaders headers() {
      return response.headers();
    }

    @Override
    public Optional<SSLSession> sslSession() {
      return response.sslSession();
    }

    @Override
    public URI uri() {
      return response.uri();
    }

    @Override
    public HttpClient.Version version() {
      return response.version();
    }
  }
}
