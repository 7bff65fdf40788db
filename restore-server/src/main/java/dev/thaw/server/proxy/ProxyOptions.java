package dev.thaw.server.proxy;

import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * How a {@link FunctionProxy} runs: where it listens, the node server's socket, the function it registers there (its
 * name, its image's registry reference, the function options it asks for) and the tenant key it registers with.
 * Setters check and are fluent. Unlike the server's options this class has no JSON form: the proxy loads no JSON
 * library (its start time is its reason to be); {@code thaw proxy} sets it from its flags and environment.
 */
public final class ProxyOptions {

  public static final String DEFAULT_HOST = "127.0.0.1";
  public static final int DEFAULT_PORT = 8080;
  public static final Path DEFAULT_SOCKET = Path.of("/run/thaw/thaw.sock");
  public static final Duration DEFAULT_DRAIN_TIMEOUT = Duration.ofSeconds(30);
  /** The first wait before registering again after the node server could not be reached; it doubles to 5 s. */
  public static final Duration DEFAULT_RETRY = Duration.ofMillis(100);
  /** Requests forwarded at once, at most. */
  public static final int DEFAULT_MAX_CONCURRENCY = 256;

  private static final Pattern NAME = Pattern.compile("[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?");
  private static final Pattern DURATION = Pattern.compile("([0-9]+(?:\\.[0-9]+)?)(ms|us|s|m)?");
  private static final Pattern OPTION = Pattern.compile("minInstances|maxInstances|keepAlive|queueCapacity");

  private String host = DEFAULT_HOST;
  private int port = DEFAULT_PORT;
  private Path socket = DEFAULT_SOCKET;
  private String function;
  private String image;
  private String tenantKey;
  private final Map<String, String> functionOptions = new LinkedHashMap<>();
  private Duration drainTimeout = DEFAULT_DRAIN_TIMEOUT;
  private Duration retry = DEFAULT_RETRY;
  private int maxConcurrency = DEFAULT_MAX_CONCURRENCY;

  public String host() {
    return host;
  }

  /** The address to listen on; loopback by default ({@code 0.0.0.0} for every interface). */
  public ProxyOptions setHost(String host) {
    if (host == null || host.isBlank()) {
      throw new IllegalArgumentException("host must be an address or a name");
    }
    this.host = host;
    return this;
  }

  public int port() {
    return port;
  }

  /** The port to listen on ({@code $PORT} under Knative); 0 picks a free one. */
  public ProxyOptions setPort(int port) {
    if (port < 0 || port > 65535) {
      throw new IllegalArgumentException("port must be 0 to 65535, not " + port);
    }
    this.port = port;
    return this;
  }

  public Path socket() {
    return socket;
  }

  /** The node server's Unix domain socket ({@code thaw serve --socket}). */
  public ProxyOptions setSocket(Path socket) {
    if (socket == null) {
      throw new IllegalArgumentException("the node server's socket is needed");
    }
    this.socket = socket;
    return this;
  }

  public String function() {
    return function;
  }

  public String image() {
    return image;
  }

  /**
   * The function this proxy serves: its name on the node server and its image's registry reference
   * ({@code host[:port]/repository[:tag][@sha256:...]}), which the server pulls.
   */
  public ProxyOptions setFunction(String name, String reference) {
    if (name == null || !NAME.matcher(name).matches()) {
      throw new IllegalArgumentException("'" + name + "' is not a function name: lower-case letters, digits and "
          + "inner - . _, at most 63 characters");
    }
    if (reference == null || reference.indexOf('/') <= 0) {
      throw new IllegalArgumentException("'" + reference + "' is not a registry reference (host[:port]/repository"
          + "[:tag]): the node server pulls the function's image from a registry");
    }
    this.function = name;
    this.image = reference;
    return this;
  }

  public String tenantKey() {
    return tenantKey;
  }

  /**
   * The tenant key the function is registered with: the same for every pod of the function (a secret of its
   * namespace), so that each of them, and only they, can register it again and reach it.
   */
  public ProxyOptions setTenantKey(String key) {
    if (key == null || key.length() < 16 || key.length() > 1024) {
      throw new IllegalArgumentException("the tenant key has 16 to 1024 characters"
          + (key == null ? "; none is set (THAW_FUNCTION_KEY)" : ", not " + key.length()));
    }
    if (!key.chars().allMatch(c -> c > 32 && c < 127)) {
      throw new IllegalArgumentException("the tenant key is printable ASCII without spaces");
    }
    this.tenantKey = key;
    return this;
  }

  /** Function options sent with the registration, as their JSON values ({@code "300s"}, {@code 2}). */
  public Map<String, String> functionOptions() {
    return functionOptions;
  }

  /**
   * One of the function's options the registration asks for: {@code minInstances}, {@code maxInstances},
   * {@code queueCapacity} (integers) or {@code keepAlive} (a duration such as {@code 300s}); the server checks them.
   */
  public ProxyOptions putFunctionOption(String name, String value) {
    if (name == null || !OPTION.matcher(name).matches()) {
      throw new IllegalArgumentException("'" + name + "' is not a function option a proxy sets; known: "
          + "minInstances, maxInstances, keepAlive, queueCapacity");
    }
    if (name.equals("keepAlive") ? !DURATION.matcher(value).matches() : !value.matches("[0-9]{1,9}")) {
      throw new IllegalArgumentException(name + " is " + (name.equals("keepAlive") ? "a duration such as 300s"
          : "a whole number") + ", not '" + value + "'");
    }
    functionOptions.put(name, value);
    return this;
  }

  public Duration drainTimeout() {
    return drainTimeout;
  }

  /** On SIGTERM: how long requests in flight may take to finish. */
  public ProxyOptions setDrainTimeout(Duration d) {
    if (d == null || d.isNegative()) {
      throw new IllegalArgumentException("drainTimeout must be zero or positive");
    }
    this.drainTimeout = d;
    return this;
  }

  public Duration retry() {
    return retry;
  }

  /** The first wait before registering again when the node server cannot be reached (it doubles, up to 5 s). */
  public ProxyOptions setRetry(Duration d) {
    if (d == null || d.isNegative() || d.isZero()) {
      throw new IllegalArgumentException("retry must be positive");
    }
    this.retry = d;
    return this;
  }

  public int maxConcurrency() {
    return maxConcurrency;
  }

  /**
   * Requests forwarded at once (one thread each, made when none is idle); a request beyond them has its connection
   * closed. Knative's {@code containerConcurrency} keeps a pod far below it.
   */
  public ProxyOptions setMaxConcurrency(int n) {
    if (n < 1 || n > 10_000) {
      throw new IllegalArgumentException("maxConcurrency must be 1 to 10000, not " + n);
    }
    this.maxConcurrency = n;
    return this;
  }

  /**
   * {@code "30s"}, {@code "250ms"}, {@code "500us"}, {@code "5m"}, or a number of seconds: the server's duration
   * form, parsed here without its JSON library.
   */
  public static Duration parseDuration(String text, String field) {
    Matcher m = text == null ? null : DURATION.matcher(text.trim());
    if (m == null || !m.matches()) {
      throw new IllegalArgumentException(field + " is a duration such as 30s, 250ms or 5m, not '" + text + "'");
    }
    double n = Double.parseDouble(m.group(1));
    String unit = m.group(2) == null ? "s" : m.group(2);
    double nanos = switch (unit) {
      case "us" -> n * 1e3;
      case "ms" -> n * 1e6;
      case "m" -> n * 60e9;
      default -> n * 1e9;
    };
    return Duration.ofNanos(Math.round(nanos));
  }

  /** Checks the options as a whole: a function and a tenant key. */
  public ProxyOptions validate() {
    if (function == null) {
      throw new IllegalArgumentException("the proxy needs its function: NAME=REFERENCE");
    }
    if (tenantKey == null) {
      throw new IllegalArgumentException("the proxy needs its tenant key (THAW_FUNCTION_KEY): 16 to 1024 characters");
    }
    return this;
  }
}
