package dev.thaw.image.archive;

/**
 * An image archive cannot be used: on import it is malformed, truncated, tampered with or incomplete, and
 * nothing was imported; on export its target is refused or cannot be written, and nothing was left behind.
 */
public class ArchiveException extends RuntimeException {

  public ArchiveException(String message) {
    super(message);
  }

  public ArchiveException(String message, Throwable cause) {
    super(message, cause);
  }
}
