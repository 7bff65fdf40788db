package dev.thaw.image.registry;

/**
 * A registry refused or failed a request, after retries where retrying made sense. Keeps the HTTP status (0 when
 * no response came: the connection failed every time) and the OCI error code of the response's body, if any
 * ({@code BLOB_UNKNOWN}, {@code MANIFEST_INVALID}, {@code DENIED}, ...).
 */
public class RegistryException extends RuntimeException {

  private final int status;
  private final String code;

  public RegistryException(String message, int status, String code) {
    this(message, status, code, null);
  }

  public RegistryException(String message, int status, String code, Throwable cause) {
    super(message, cause);
    this.status = status;
    this.code = code;
  }

  /** The HTTP status, or 0 when there was no response. */
  public int status() {
    return status;
  }

  /** The first OCI error code of the response, or null. */
  public String code() {
    return code;
  }
}
