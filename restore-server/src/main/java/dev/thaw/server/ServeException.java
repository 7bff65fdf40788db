package dev.thaw.server;

/**
 * A request the server cannot serve, with the HTTP status that says why and a short machine-readable code.
 * {@link #retryAfterSeconds()} is positive when trying again later may succeed (HTTP {@code Retry-After}).
 */
public class ServeException extends RuntimeException {

  private final int status;
  private final String code;
  private final long retryAfterSeconds;

  public ServeException(int status, String code, String message, long retryAfterSeconds) {
    super(message, null, false, false);
    this.status = status;
    this.code = code;
    this.retryAfterSeconds = retryAfterSeconds;
  }

  public ServeException(int status, String code, String message) {
    this(status, code, message, 0);
  }

  public int status() {
    return status;
  }

  public String code() {
    return code;
  }

  public long retryAfterSeconds() {
    return retryAfterSeconds;
  }

  public static ServeException notFound(String function) {
    return new ServeException(404, "function_not_found", "no function named '" + function + "'");
  }

  public static ServeException badRequest(String message) {
    return new ServeException(400, "bad_request", message);
  }
}
