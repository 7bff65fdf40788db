package dev.thaw.image.store;

import java.nio.file.Path;

/**
 * The store at {@link #path()} failed: an I/O error (a full disk, a missing or unreadable directory), a
 * corrupt database, or an operation the store was not opened for. Keeps RocksDB's status code when there
 * was one ({@link #statusCode()}: {@code IOError}, {@code Corruption}, ...; {@code null} otherwise).
 */
public class StoreException extends RuntimeException {

  private final transient Path path;
  private final String statusCode;

  public StoreException(Path path, String message, String statusCode, Throwable cause) {
    super("store " + path + ": " + message + (statusCode == null ? "" : " [" + statusCode + "]"), cause);
    this.path = path;
    this.statusCode = statusCode;
  }

  public StoreException(Path path, String message) {
    this(path, message, null, null);
  }

  public Path path() {
    return path;
  }

  public String statusCode() {
    return statusCode;
  }
}
