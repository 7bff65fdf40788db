package dev.thaw.image.restore;

import dev.thaw.image.store.Digest;

/** A stored chunk's bytes do not hash to its name: the store is damaged and the image cannot be used from it. */
public class CorruptChunkException extends RuntimeException {

  private final Digest digest;

  public CorruptChunkException(Digest digest, String why) {
    super("chunk " + digest + " is corrupt: " + why);
    this.digest = digest;
  }

  /** The digest the chunk is stored under (what the manifest names). */
  public Digest digest() {
    return digest;
  }
}
