package dev.thaw.examples.safetensors;

import java.io.IOException;

/**
 * A safetensors file that cannot be read as one: a header that is too long, not JSON or not a tensor table,
 * a tensor whose dtype, shape or offsets do not agree. The message names the file and, where there is one,
 * the tensor.
 */
public class SafetensorsException extends IOException {

  public SafetensorsException(String message) {
    super(message);
  }

  public SafetensorsException(String message, Throwable cause) {
    super(message, cause);
  }
}
