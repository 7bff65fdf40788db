package dev.thaw.server.spi;

/**
 * An instance was gone before a request reached it: its process had ended (say, a worker that died while idle), so
 * nothing of the request was sent. The server serves such a request from another instance.
 */
public class InstanceLostException extends RuntimeException {

  public InstanceLostException(String message, Throwable cause) {
    super(message, cause);
  }
}
