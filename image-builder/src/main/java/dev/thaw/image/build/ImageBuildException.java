package dev.thaw.image.build;

/** A build failed; the message names the function, the phase and why. Nothing was committed. */
public class ImageBuildException extends RuntimeException {

  private final String phase;

  public ImageBuildException(String phase, String message, Throwable cause) {
    super(message, cause);
    this.phase = phase;
  }

  /** The phase that failed: {@code load}, {@code init}, {@code profile}, {@code snapshot}, {@code commit}. */
  public String phase() {
    return phase;
  }
}
