package dev.thaw.image;

/** No image is stored under a tag. */
public class ImageNotFoundException extends RuntimeException {

  private final String tag;

  public ImageNotFoundException(String tag) {
    super("no image tagged '" + tag + "' in the store");
    this.tag = tag;
  }

  public String tag() {
    return tag;
  }
}
