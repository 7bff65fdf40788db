package dev.thaw.image.registry;

/** An OCI manifest over the size a registry (or {@link RegistryOptions#maxManifestBytes}) accepts. */
public final class ManifestTooLargeException extends RegistryException {

  private final long bytes;
  private final long limit;

  public ManifestTooLargeException(String message, int status, long bytes, long limit) {
    super(message, status, "MANIFEST_INVALID");
    this.bytes = bytes;
    this.limit = limit;
  }

  /** The manifest's size, or -1 when unknown. */
  public long bytes() {
    return bytes;
  }

  /** The limit it passed, or -1 when the registry did not say. */
  public long limit() {
    return limit;
  }
}
