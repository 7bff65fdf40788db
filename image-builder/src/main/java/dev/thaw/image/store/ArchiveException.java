package dev.thaw.image.store;

/** An image archive is malformed, truncated, tampered with or incomplete; nothing was imported. */
public class ArchiveException extends RuntimeException {

  public ArchiveException(String message) {
    super(message);
  }

  public ArchiveException(String message, Throwable cause) {
    super(message, cause);
  }
}
