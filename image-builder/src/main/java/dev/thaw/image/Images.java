package dev.thaw.image;

import dev.thaw.image.store.ChunkStore;

/** Reading images out of a store by tag. */
public final class Images {

  private Images() {}

  /**
   * The checked manifest {@code tag} points at.
   *
   * @throws ImageNotFoundException if no image has that tag
   * @throws InvalidManifestException if the stored manifest does not read, naming the tag
   */
  public static ImageManifest manifest(ChunkStore store, String tag) {
    byte[] bytes = store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    try {
      return ImageManifest.read(bytes);
    } catch (InvalidManifestException e) {
      throw new InvalidManifestException("image '" + tag + "': " + e.getMessage(), e);
    }
  }
}
