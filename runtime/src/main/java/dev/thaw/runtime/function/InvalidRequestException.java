package dev.thaw.runtime.function;

/** A request the function cannot serve; the message names what is wrong. Maps to HTTP 400 at the server. */
public class InvalidRequestException extends RuntimeException {

  public InvalidRequestException(String message) {
    super(message);
  }
}
