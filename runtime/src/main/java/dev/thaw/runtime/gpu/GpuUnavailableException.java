package dev.thaw.runtime.gpu;

/** A GPU was required ({@code THAW_DEVICE=cuda}) and none is usable; the message says why. */
public class GpuUnavailableException extends RuntimeException {

  public GpuUnavailableException(String message) {
    super(message);
  }
}
