package dev.thaw.image.store;

/** A chunk an image names is not in the store. */
public class ChunkNotFoundException extends RuntimeException {

  private final Digest digest;

  public ChunkNotFoundException(Digest digest) {
    super("chunk " + digest + " is not in the store");
    this.digest = digest;
  }

  public Digest digest() {
    return digest;
  }
}
