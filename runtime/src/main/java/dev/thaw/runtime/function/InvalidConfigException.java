package dev.thaw.runtime.function;

/** A function configuration that cannot be built; the message names what is wrong. */
public class InvalidConfigException extends RuntimeException {

  public InvalidConfigException(String message) {
    super(message);
  }

  public InvalidConfigException(String message, Throwable cause) {
    super(message, cause);
  }
}
