package dev.thaw.image.restore;

/** A restore that cannot go on; the message names the image and why. Nothing of it stays mapped. */
public class ImageRestoreException extends RuntimeException {

  public ImageRestoreException(String message) {
    super(message);
  }

  public ImageRestoreException(String message, Throwable cause) {
    super(message, cause);
  }
}
