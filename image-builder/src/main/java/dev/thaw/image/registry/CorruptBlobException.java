package dev.thaw.image.registry;

import dev.thaw.image.store.Digest;

/** A blob's bytes do not hash to the digest they were fetched by, or have another length: never stored. */
public final class CorruptBlobException extends RegistryException {

  private final Digest expected;

  public CorruptBlobException(String message, Digest expected) {
    super(message, 0, null);
    this.expected = expected;
  }

  public Digest expected() {
    return expected;
  }
}
