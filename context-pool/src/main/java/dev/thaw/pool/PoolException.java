package dev.thaw.pool;

/** A failure of the context pool or one of its workers. */
public class PoolException extends RuntimeException {

  public PoolException(String message) {
    super(message);
  }

  public PoolException(String message, Throwable cause) {
    super(message, cause);
  }
}
