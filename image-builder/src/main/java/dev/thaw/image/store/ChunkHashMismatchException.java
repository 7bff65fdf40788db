package dev.thaw.image.store;

import java.nio.file.Path;

/** A stored chunk's bytes no longer hash to its digest: the store's own check on a verifying read. */
public class ChunkHashMismatchException extends StoreException {

  private final Digest digest;
  private final transient Digest actual;

  public ChunkHashMismatchException(Path path, Digest digest, Digest actual) {
    super(path, "chunk " + digest + " is damaged: its bytes hash to " + actual);
    this.digest = digest;
    this.actual = actual;
  }

  public Digest digest() {
    return digest;
  }

  public Digest actual() {
    return actual;
  }
}
