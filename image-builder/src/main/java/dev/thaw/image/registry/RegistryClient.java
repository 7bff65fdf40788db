package dev.thaw.image.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.store.Digest;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpRequest.BodyPublisher;
import java.net.http.HttpRequest.BodyPublishers;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Supplier;

/**
 * The OCI distribution API of one registry, blocking, over {@code java.net.http}: blobs (HEAD, GET, upload,
 * cross-repository mount) and manifests (GET, PUT).
 *
 * <p>Every request is retried with exponential backoff and jitter on a 5xx, a 429 (waiting what its {@code
 * Retry-After} says) and a lost connection, up to {@link RegistryOptions#maxAttempts()}; a body cut off midway
 * counts as a lost connection, and so does a registry gone silent: every response is read under deadlines
 * ({@link RegistryOptions#readTimeout()} between bytes and, for a request that sends no body, until its head; {@link
 * RegistryOptions#requestTimeout()} for the whole exchange), so a registry that stops sending fails the request in
 * time instead of blocking a read forever. An upload that fails midway starts again from a new session. A {@code
 * 401} is answered once per request from its {@code WWW-Authenticate} challenge: {@code Basic} with the registry's
 * login, or {@code Bearer} with a token from the challenge's realm (asked with the login when there is one); tokens are
 * kept per scope. A blob read is verified against its digest and length before it is returned: a mismatch is
 * {@link CorruptBlobException}, never retried into success.
 *
 * <p>Thread-safe; counters ({@link #bytesUploaded()}, ...) cover all threads.
 */
public final class RegistryClient implements AutoCloseable {

  public static final String OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String registry;
  private final URI base;
  private final RegistryOptions options;
  private final HttpClient http;
  private final Map<String, String> tokens = new ConcurrentHashMap<>();
  private volatile String basic;
  private final AtomicLong bytesUploaded = new AtomicLong();
  private final AtomicLong bytesDownloaded = new AtomicLong();
  private final AtomicLong requests = new AtomicLong();
  private final AtomicLong retries = new AtomicLong();

  /** A manifest as the registry served it. */
  public record Manifest(byte[] bytes, String mediaType, Digest digest) {}

  public RegistryClient(String registry, RegistryOptions options) {
    this.registry = registry;
    this.options = new RegistryOptions(options);
    boolean plain = options.plainHttp().contains(registry)
        || RegistryReference.parse(registry + "/x").isLoopback();
    this.base = URI.create((plain ? "http://" : "https://") + registry);
    this.http = HttpClient.newBuilder()
        .version(plain ? HttpClient.Version.HTTP_1_1 : HttpClient.Version.HTTP_2)
        .connectTimeout(options.connectTimeout())
        .followRedirects(HttpClient.Redirect.NEVER)
        .build();
  }

  public String registry() {
    return registry;
  }

  /** Bytes of blob bodies sent, every attempt counted (an attempt cut off midway counts whole). */
  public long bytesUploaded() {
    return bytesUploaded.get();
  }

  /** Bytes of blob and manifest bodies received. */
  public long bytesDownloaded() {
    return bytesDownloaded.get();
  }

  public long requests() {
    return requests.get();
  }

  /** Requests sent again after a 5xx, a 429 or a lost connection. */
  public long retries() {
    return retries.get();
  }

  // ------------------------------------------------------------------------------------------------ blobs

  /** The blob's size if the repository has it ({@code HEAD}). */
  public Optional<Long> blobSize(String repository, Digest digest) {
    return execute(Request.of("HEAD", blobUri(repository, digest)), pull(repository), true, r -> {
      if (r.statusCode() == 404) {
        return Optional.empty();
      }
      expect(r, "HEAD blob " + digest, 200);
      return Optional.of(r.headers().firstValueAsLong("Content-Length").orElse(-1));
    });
  }

  /**
   * Asks the registry to link a blob it holds in {@code fromRepository} into {@code repository} without an
   * upload. True if it did (201); false if it did not (202: the upload session it opened instead is cancelled).
   */
  public boolean mountBlob(String repository, Digest digest, String fromRepository) {
    URI uri = uploadsUri(repository, "mount=" + encode(digest.toString()) + "&from=" + encode(fromRepository));
    List<String> scopes = List.of(scope(repository, "pull,push"), scope(fromRepository, "pull"));
    Optional<URI> session = execute(Request.of("POST", uri).body(BodyPublishers::noBody), scopes, true, r -> {
      if (r.statusCode() == 201) {
        return Optional.empty();
      }
      expect(r, "mount " + digest + " from " + fromRepository, 202);
      return Optional.of(location(r));
    });
    if (session.isEmpty()) {
      return true;
    }
    try {
      execute(Request.of("DELETE", session.get()), push(repository), false, r -> null);
    } catch (RegistryException e) {
      // Cancelling is a courtesy: an abandoned session expires on its own.
    }
    return false;
  }

  /**
   * Uploads a blob whose bytes are {@code parts} in order: in one {@code PUT} up to {@link
   * RegistryOptions#monolithicLimit()}, else in {@code PATCH} parts of {@link RegistryOptions#uploadPartBytes()}
   * and a closing {@code PUT}. An upload that fails midway (lost connection, 5xx) starts again in a new session.
   *
   * @throws RegistryException if the registry refuses it, or it failed {@code maxAttempts} times
   */
  public void uploadBlob(String repository, Digest digest, List<byte[]> parts) {
    long size = 0;
    for (byte[] p : parts) {
      size += p.length;
    }
    RuntimeException last = null;
    for (int attempt = 1; attempt <= options.maxAttempts(); attempt++) {
      if (attempt > 1) {
        retries.incrementAndGet();
        sleep(backoff(attempt - 1));
      }
      try {
        uploadOnce(repository, digest, parts, size);
        return;
      } catch (RetryableUpload e) {
        last = e;
      }
    }
    throw new RegistryException("upload of " + digest + " to " + registry + "/" + repository + " failed "
        + options.maxAttempts() + " times; last: " + last.getMessage(), 0, null, last.getCause());
  }

  private void uploadOnce(String repository, Digest digest, List<byte[]> parts, long size) {
    URI session = execute(Request.of("POST", uploadsUri(repository, null)).body(BodyPublishers::noBody),
        push(repository), true, r -> {
          expect(r, "start upload of " + digest, 202);
          return location(r);
        });
    if (size > options.monolithicLimit()) {
      for (long offset = 0; offset < size; ) {
        int n = (int) Math.min(options.uploadPartBytes(), size - offset);
        long from = offset;
        URI at = session;
        session = sessionRequest(Request.of("PATCH", at)
            .header("Content-Type", "application/octet-stream")
            .header("Content-Range", from + "-" + (from + n - 1))
            .blob(() -> slice(parts, from, n), n), repository, "PATCH part at " + from + " of " + digest, 202,
            this::location);
        offset += n;
      }
      URI close = withQuery(session, "digest=" + encode(digest.toString()));
      finish(sessionRequest(Request.of("PUT", close).body(BodyPublishers::noBody), repository,
          "finish upload of " + digest, 201, r -> r.headers()), digest);
    } else {
      URI put = withQuery(session, "digest=" + encode(digest.toString()));
      finish(sessionRequest(Request.of("PUT", put)
          .header("Content-Type", "application/octet-stream")
          .blob(() -> slice(parts, 0, size), size), repository, "upload of " + digest, 201, r -> r.headers()), digest);
    }
  }

  private void finish(HttpHeaders headers, Digest digest) {
    Optional<String> echoed = headers.firstValue("Docker-Content-Digest");
    if (echoed.isPresent() && !echoed.get().equals(digest.toString())) {
      throw new CorruptBlobException("the registry stored " + digest + " as " + echoed.get(), digest);
    }
  }

  /** A request inside an upload session: any failure restarts the whole upload rather than this request. */
  private <T> T sessionRequest(Request request, String repository, String what, int expected,
      ResponseReader<T> reader) {
    try {
      return execute(request, push(repository), false, r -> {
        if (retryable(r.statusCode())) {
          throw new RetryableUpload(what + ": HTTP " + r.statusCode(), null);
        }
        expect(r, what, expected);
        return reader.read(r);
      });
    } catch (RegistryException e) {
      if (e.status() == 0 && e.getCause() instanceof IOException io) {
        throw new RetryableUpload(what + ": " + io, io);
      }
      throw e;
    }
  }

  /**
   * Reads a blob and checks it: exactly {@code size} bytes that hash to {@code digest}. A body cut off midway is
   * fetched again; bytes that do not match are {@link CorruptBlobException} at once.
   */
  public byte[] getBlob(String repository, Digest digest, long size) {
    if (size < 0 || size > Integer.MAX_VALUE - 8) {
      throw new IllegalArgumentException("blob " + digest + " has " + size + " bytes: more than one array holds");
    }
    return execute(Request.of("GET", blobUri(repository, digest)), pull(repository), true, r -> {
      if (isRedirect(r.statusCode())) {
        // Storage behind the registry (S3, GCS) serves the bytes at a signed URL that must not get our token.
        URI target = location(r);
        r.body().close();
        try {
          long start = System.nanoTime();
          HttpResponse<InputStream> direct = ResponseDeadline.of(http.send(HttpRequest.newBuilder(target)
              .timeout(headTimeout(BodyPublishers.noBody())).GET().build(), HttpResponse.BodyHandlers.ofInputStream()),
              start, options);
          if (retryable(direct.statusCode())) {
            direct.body().close();
            throw new IOException("HTTP " + direct.statusCode() + " from the blob's storage");
          }
          expect(direct, "GET blob " + digest + " from storage", 200);
          return readBlob(direct, digest, (int) size);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new RegistryException("interrupted", 0, null, e);
        }
      }
      expect(r, "GET blob " + digest, 200);
      return readBlob(r, digest, (int) size);
    });
  }

  private byte[] readBlob(HttpResponse<InputStream> r, Digest digest, int size) throws IOException {
    long declared = r.headers().firstValueAsLong("Content-Length").orElse(-1);
    if (declared >= 0 && declared != size) {
      r.body().close();
      throw new CorruptBlobException("blob " + digest + " is served with " + declared + " bytes; its descriptor says "
          + size, digest);
    }
    byte[] bytes = new byte[size];
    try (InputStream in = r.body()) {
      int n = in.readNBytes(bytes, 0, size);
      bytesDownloaded.addAndGet(n);
      if (n < size) {
        throw new IOException("blob " + digest + " was cut off after " + n + " of " + size + " bytes");
      }
      if (in.read() != -1) {
        throw new CorruptBlobException("blob " + digest + " has more bytes than its descriptor's " + size, digest);
      }
    }
    Digest actual = Digest.of(bytes);
    if (!actual.equals(digest)) {
      throw new CorruptBlobException("blob " + digest + " from " + registry + " is damaged: its bytes hash to "
          + actual, digest);
    }
    return bytes;
  }

  // -------------------------------------------------------------------------------------------- manifests

  /**
   * Reads a manifest; one over {@code maxBytes} is refused unread. When {@code reference} is a digest, the bytes
   * must hash to it; a {@code Docker-Content-Digest} the registry sends must match them too.
   */
  public Manifest getManifest(String repository, String reference, int maxBytes) {
    return execute(Request.of("GET", manifestUri(repository, reference)).header("Accept", OCI_MANIFEST),
        pull(repository), true, r -> {
          if (r.statusCode() == 404) {
            r.body().close();
            throw new RegistryException("no manifest " + repository + ":" + reference + " in " + registry, 404,
                "MANIFEST_UNKNOWN");
          }
          expect(r, "GET manifest " + reference, 200);
          long declared = r.headers().firstValueAsLong("Content-Length").orElse(-1);
          if (declared > maxBytes) {
            r.body().close();
            throw tooLarge(declared, maxBytes, 0);
          }
          byte[] bytes;
          try (InputStream in = r.body()) {
            bytes = in.readNBytes(maxBytes + 1);
          }
          if (bytes.length > maxBytes) {
            throw tooLarge(-1, maxBytes, 0);
          }
          if (declared >= 0 && bytes.length < declared) {
            throw new IOException("the manifest was cut off after " + bytes.length + " of " + declared + " bytes");
          }
          bytesDownloaded.addAndGet(bytes.length);
          Digest actual = Digest.of(bytes);
          String echoed = r.headers().firstValue("Docker-Content-Digest").orElse(null);
          if (reference.startsWith("sha256:") && !actual.toString().equals(reference)) {
            throw new CorruptBlobException("manifest " + reference + " hashes to " + actual, Digest.parse(reference));
          }
          if (echoed != null && echoed.startsWith("sha256:") && !echoed.equals(actual.toString())) {
            throw new CorruptBlobException("manifest " + reference + " is served as " + echoed + " but hashes to "
                + actual, Digest.parse(echoed));
          }
          String type = r.headers().firstValue("Content-Type").orElse("");
          return new Manifest(bytes, type, actual);
        });
  }

  private ManifestTooLargeException tooLarge(long bytes, long limit, int status) {
    return new ManifestTooLargeException("the manifest has " + (bytes < 0 ? "more than " + limit : bytes)
        + " bytes; at most " + limit + " are accepted", status, bytes, limit);
  }

  /** Stores a manifest under {@code reference} (a tag or its digest); returns its digest. */
  public Digest putManifest(String repository, String reference, byte[] body, String mediaType) {
    Digest digest = Digest.of(body);
    return execute(Request.of("PUT", manifestUri(repository, reference)).header("Content-Type", mediaType)
        .body(() -> BodyPublishers.ofByteArray(body)), push(repository), true, r -> {
          if (r.statusCode() == 413) {
            r.body().close();
            throw new ManifestTooLargeException(registry + " refused a manifest of " + body.length
                + " bytes as too large (HTTP 413)", 413, body.length, -1);
          }
          if (r.statusCode() == 400) {
            ErrorBody e = errorBody(r);
            if (e.message().toLowerCase(Locale.ROOT).matches(".*(too (big|large)|exceed|size).*")) {
              throw new ManifestTooLargeException(registry + " refused a manifest of " + body.length + " bytes: "
                  + e.message(), 400, body.length, -1);
            }
            throw new RegistryException("PUT manifest " + reference + ": HTTP 400 " + e, 400, e.code());
          }
          expect(r, "PUT manifest " + reference, 201);
          String echoed = r.headers().firstValue("Docker-Content-Digest").orElse(digest.toString());
          if (!echoed.equals(digest.toString())) {
            throw new CorruptBlobException("the registry stored manifest " + digest + " as " + echoed, digest);
          }
          return digest;
        });
  }

  // ---------------------------------------------------------------------------------------------- plumbing

  @FunctionalInterface
  private interface ResponseReader<T> {
    T read(HttpResponse<InputStream> response) throws IOException;
  }

  /** A request that can be built again for every attempt (a body publisher is single-use). */
  private record Request(String method, URI uri, Map<String, String> headers, Supplier<BodyPublisher> body,
      long blobBytes) {
    static Request of(String method, URI uri) {
      return new Request(method, uri, new LinkedHashMap<>(), BodyPublishers::noBody, 0);
    }

    Request header(String name, String value) {
      headers.put(name, value);
      return this;
    }

    Request body(Supplier<BodyPublisher> publisher) {
      return new Request(method, uri, headers, publisher, 0);
    }

    /** A body of blob bytes, counted in {@link #bytesUploaded} at every attempt. */
    Request blob(Supplier<BodyPublisher> publisher, long bytes) {
      return new Request(method, uri, headers, publisher, bytes);
    }
  }

  /** A failure inside an upload session: the upload starts over. */
  private static final class RetryableUpload extends RuntimeException {
    RetryableUpload(String message, Throwable cause) {
      super(message, cause, false, false);
    }
  }

  private <T> T execute(Request request, List<String> scopes, boolean retry, ResponseReader<T> reader) {
    boolean answeredChallenge = false;
    int attempt = 0;
    while (true) {
      attempt++;
      BodyPublisher body = request.body().get();
      long start = System.nanoTime();
      HttpRequest.Builder b = HttpRequest.newBuilder(request.uri()).timeout(headTimeout(body))
          .method(request.method(), body);
      request.headers().forEach(b::header);
      authorization(scopes).ifPresent(a -> b.header("Authorization", a));
      requests.incrementAndGet();
      bytesUploaded.addAndGet(request.blobBytes());
      Duration wait;
      try {
        HttpResponse<InputStream> r = ResponseDeadline.of(http.send(b.build(),
            HttpResponse.BodyHandlers.ofInputStream()), start, options);
        int status = r.statusCode();
        if (status == 401 && !answeredChallenge) {
          r.body().close();
          answerChallenge(r.headers(), scopes);
          answeredChallenge = true;
          attempt--;
          continue;
        }
        if (status == 401 || status == 403) {
          ErrorBody e = errorBody(r);
          throw new RegistryAuthException(request.method() + " " + request.uri().getPath() + ": " + registry
              + " refused " + (basic != null || !tokens.isEmpty() ? "the credentials from "
              + options.credentials().source() : "an anonymous request") + " (HTTP " + status + " " + e + ")",
              status, e.code());
        }
        if (retry && retryable(status) && attempt < options.maxAttempts()) {
          Optional<Duration> after = retryAfter(r.headers());
          r.body().close();
          if (after.isPresent() && after.get().compareTo(options.maxRetryAfter()) > 0) {
            throw new RegistryException(registry + " asks to retry after " + after.get().toSeconds()
                + " s, more than the " + options.maxRetryAfter().toSeconds() + " s allowed", status, null);
          }
          wait = after.orElse(backoff(attempt));
        } else {
          try {
            return reader.read(r);
          } finally {
            // Read or not (a HEAD's, a 201's), the body is done with: its deadlines stop with it.
            r.body().close();
          }
        }
      } catch (IOException e) {
        if (!retry || attempt >= options.maxAttempts()) {
          throw new RegistryException(request.method() + " " + request.uri().getPath() + " on " + registry
              + " failed" + (retry ? " " + attempt + " times" : "") + ": " + describe(e), 0, null, e);
        }
        wait = backoff(attempt);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RegistryException("interrupted during " + request.method() + " " + request.uri(), 0, null, e);
      }
      retries.incrementAndGet();
      sleep(wait);
    }
  }

  /**
   * How long to wait for a response's head: a request that sends no body is answered at once by a live registry,
   * so its wait is the read timeout; one that uploads waits while its body goes out, up to the request timeout.
   */
  private Duration headTimeout(BodyPublisher body) {
    return body.contentLength() == 0 && options.readTimeout().compareTo(options.requestTimeout()) < 0
        ? options.readTimeout() : options.requestTimeout();
  }

  private static String describe(IOException e) {
    if (e instanceof ConnectException) {
      return "cannot connect" + (e.getMessage() == null ? "" : " (" + e.getMessage() + ")");
    }
    if (e instanceof HttpTimeoutException) {
      return "timed out" + (e.getMessage() == null ? "" : " (" + e.getMessage() + ")");
    }
    return e.getMessage() == null ? "connection lost (" + e.getClass().getSimpleName() + ")"
        : "connection lost: " + e.getMessage();
  }

  private static boolean retryable(int status) {
    return status == 429 || status == 502 || status == 503 || status == 504 || status == 500;
  }

  private static boolean isRedirect(int status) {
    return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
  }

  /** Exponential from the initial backoff, capped, with full jitter in its upper half. */
  private Duration backoff(int attempt) {
    long base = options.initialBackoff().toMillis() << Math.min(attempt - 1, 20);
    long capped = Math.min(base, options.maxBackoff().toMillis());
    return Duration.ofMillis(capped / 2 + ThreadLocalRandom.current().nextLong(capped / 2 + 1));
  }

  /** {@code Retry-After} as delta-seconds or an HTTP date. */
  static Optional<Duration> retryAfter(HttpHeaders headers) {
    Optional<String> v = headers.firstValue("Retry-After").map(String::trim);
    if (v.isEmpty()) {
      return Optional.empty();
    }
    try {
      return Optional.of(Duration.ofSeconds(Math.max(0, Long.parseLong(v.get()))));
    } catch (NumberFormatException e) {
      try {
        ZonedDateTime at = ZonedDateTime.parse(v.get(), DateTimeFormatter.RFC_1123_DATE_TIME);
        Duration d = Duration.between(ZonedDateTime.now(at.getZone()), at);
        return Optional.of(d.isNegative() ? Duration.ZERO : d);
      } catch (DateTimeParseException ex) {
        return Optional.empty();
      }
    }
  }

  private static void sleep(Duration d) {
    try {
      Thread.sleep(d.toMillis());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RegistryException("interrupted while waiting to retry", 0, null, e);
    }
  }

  private void expect(HttpResponse<InputStream> r, String what, int expected) throws IOException {
    if (r.statusCode() != expected) {
      ErrorBody e = errorBody(r);
      throw new RegistryException(what + " on " + registry + ": HTTP " + r.statusCode() + " " + e, r.statusCode(),
          e.code());
    }
  }

  /** The OCI error body's first code and message ({@code {"errors":[{"code":...,"message":...}]}}). */
  private record ErrorBody(String code, String message) {
    @Override
    public String toString() {
      return code == null ? message : code + ": " + message;
    }
  }

  private static ErrorBody errorBody(HttpResponse<InputStream> r) {
    byte[] body;
    try (InputStream in = r.body()) {
      body = in.readNBytes(64 << 10);
    } catch (IOException e) {
      return new ErrorBody(null, "(no body: " + e.getMessage() + ")");
    }
    try {
      JsonNode first = JSON.readTree(body).path("errors").path(0);
      if (first.isObject()) {
        JsonNode detail = first.path("detail");
        String more = detail.isMissingNode() || detail.isNull() ? ""
            : " (" + (detail.isTextual() ? detail.asText() : detail.toString()) + ")";
        return new ErrorBody(first.path("code").asText(null), first.path("message").asText("") + more);
      }
    } catch (IOException e) {
      // not JSON: show the text
    }
    String text = new String(body, StandardCharsets.UTF_8).strip();
    return new ErrorBody(null, text.length() > 200 ? text.substring(0, 200) + "..." : text);
  }

  private URI location(HttpResponse<?> r) {
    String loc = r.headers().firstValue("Location")
        .orElseThrow(() -> new RegistryException(registry + " answered " + r.statusCode() + " without a Location",
            r.statusCode(), null));
    return r.uri().resolve(loc);
  }

  private static URI withQuery(URI uri, String query) {
    String s = uri.toString();
    return URI.create(s + (s.contains("?") ? "&" : "?") + query);
  }

  private static BodyPublisher slice(List<byte[]> parts, long from, long length) {
    List<BodyPublisher> pieces = new ArrayList<>();
    long pos = 0;
    long end = from + length;
    for (byte[] p : parts) {
      long pEnd = pos + p.length;
      if (pEnd > from && pos < end) {
        int off = (int) Math.max(0, from - pos);
        int to = (int) Math.min(p.length, end - pos);
        pieces.add(BodyPublishers.ofByteArray(p, off, to - off));
      }
      pos = pEnd;
    }
    return pieces.size() == 1 ? pieces.get(0) : BodyPublishers.concat(pieces.toArray(BodyPublisher[]::new));
  }

  private URI blobUri(String repository, Digest digest) {
    return base.resolve("/v2/" + repository + "/blobs/" + digest);
  }

  private URI manifestUri(String repository, String reference) {
    return base.resolve("/v2/" + repository + "/manifests/" + reference);
  }

  private URI uploadsUri(String repository, String query) {
    return base.resolve("/v2/" + repository + "/blobs/uploads/" + (query == null ? "" : "?" + query));
  }

  private static String encode(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  private static String scope(String repository, String actions) {
    return "repository:" + repository + ":" + actions;
  }

  private static List<String> pull(String repository) {
    return List.of(scope(repository, "pull"));
  }

  private static List<String> push(String repository) {
    return List.of(scope(repository, "pull,push"));
  }

  // -------------------------------------------------------------------------------------------------- auth

  private Optional<String> authorization(List<String> scopes) {
    String token = tokens.get(String.join(" ", new TreeSet<>(scopes)));
    return Optional.ofNullable(token != null ? token : basic);
  }

  private void answerChallenge(HttpHeaders headers, List<String> scopes) throws IOException, InterruptedException {
    String challenge = headers.firstValue("WWW-Authenticate").orElseThrow(() -> new RegistryAuthException(registry
        + " answered 401 without a WWW-Authenticate challenge", 401, null));
    int space = challenge.indexOf(' ');
    String scheme = (space < 0 ? challenge : challenge.substring(0, space)).toLowerCase(Locale.ROOT);
    Map<String, String> params = challengeParams(space < 0 ? "" : challenge.substring(space + 1));
    Optional<RegistryCredentials.Login> login = options.credentials().forRegistry(registry);
    if (scheme.equals("basic")) {
      RegistryCredentials.Login l = login.orElseThrow(() -> new RegistryAuthException(registry
          + " asks for a login (basic auth) and there is none for it in " + options.credentials().source(), 401,
          "UNAUTHORIZED"));
      basic = basicHeader(l);
      return;
    }
    if (!scheme.equals("bearer")) {
      throw new RegistryAuthException(registry + " asks for " + scheme + " authentication, which Thaw does not speak",
          401, "UNAUTHORIZED");
    }
    String realm = params.get("realm");
    if (realm == null) {
      throw new RegistryAuthException(registry + "'s bearer challenge has no realm: " + challenge, 401, null);
    }
    TreeSet<String> wanted = new TreeSet<>(scopes);
    if (params.containsKey("scope")) {
      wanted.addAll(List.of(params.get("scope").split(" ")));
    }
    StringBuilder query = new StringBuilder();
    if (params.containsKey("service")) {
      query.append("service=").append(encode(params.get("service")));
    }
    for (String s : wanted) {
      query.append(query.length() == 0 ? "" : "&").append("scope=").append(encode(s));
    }
    URI tokenUri = withQuery(URI.create(realm), query.toString());
    HttpRequest.Builder b = HttpRequest.newBuilder(tokenUri).timeout(headTimeout(BodyPublishers.noBody())).GET();
    login.ifPresent(l -> b.header("Authorization", basicHeader(l)));
    requests.incrementAndGet();
    long start = System.nanoTime();
    HttpResponse<InputStream> r = ResponseDeadline.of(http.send(b.build(), HttpResponse.BodyHandlers.ofInputStream()),
        start, options);
    byte[] answer;
    try (InputStream in = r.body()) {
      answer = in.readNBytes(1 << 20);
    }
    if (r.statusCode() != 200) {
      throw new RegistryAuthException("the token service " + realm + " refused " + (login.isPresent()
          ? "the login from " + options.credentials().source() : "an anonymous request") + ": HTTP " + r.statusCode(),
          r.statusCode(), "UNAUTHORIZED");
    }
    JsonNode body = JSON.readTree(answer);
    String token = body.hasNonNull("token") ? body.get("token").asText() : body.path("access_token").asText(null);
    if (token == null || token.isEmpty()) {
      throw new RegistryAuthException("the token service " + realm + " answered without a token", 200, null);
    }
    tokens.put(String.join(" ", new TreeSet<>(scopes)), "Bearer " + token);
  }

  private static String basicHeader(RegistryCredentials.Login l) {
    return "Basic " + Base64.getEncoder().encodeToString((l.username() + ":" + l.password())
        .getBytes(StandardCharsets.UTF_8));
  }

  /** {@code realm="https://x/token",service="reg",scope="repository:a:pull,push"}: commas inside quotes stay. */
  static Map<String, String> challengeParams(String s) {
    Map<String, String> out = new LinkedHashMap<>();
    int i = 0;
    while (i < s.length()) {
      while (i < s.length() && (s.charAt(i) == ',' || s.charAt(i) == ' ')) {
        i++;
      }
      int eq = s.indexOf('=', i);
      if (eq < 0) {
        break;
      }
      String key = s.substring(i, eq).trim().toLowerCase(Locale.ROOT);
      i = eq + 1;
      String value;
      if (i < s.length() && s.charAt(i) == '"') {
        StringBuilder v = new StringBuilder();
        i++;
        while (i < s.length() && s.charAt(i) != '"') {
          if (s.charAt(i) == '\\' && i + 1 < s.length()) {
            i++;
          }
          v.append(s.charAt(i++));
        }
        i++;
        value = v.toString();
      } else {
        int comma = s.indexOf(',', i);
        value = (comma < 0 ? s.substring(i) : s.substring(i, comma)).trim();
        i = comma < 0 ? s.length() : comma;
      }
      out.put(key, value);
    }
    return out;
  }

  @Override
  public void close() {
    // HttpClient is AutoCloseable only from Java 21; its threads are daemons and its connections idle out.
  }
}
