package dev.thaw.image;

/** A manifest that cannot be read as an image: not JSON, another schema version, or a field that is wrong. */
public class InvalidManifestException extends RuntimeException {

  public InvalidManifestException(String message) {
    super(message);
  }

  public InvalidManifestException(String message, Throwable cause) {
    super(message, cause);
  }
}
