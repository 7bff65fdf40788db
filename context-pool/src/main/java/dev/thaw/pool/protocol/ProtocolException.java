package dev.thaw.pool.protocol;

import java.io.IOException;

/** The bytes on a worker pipe are not a frame of this protocol: the stream cannot be trusted any more. */
public class ProtocolException extends IOException {

  public ProtocolException(String message) {
    super(message);
  }
}
