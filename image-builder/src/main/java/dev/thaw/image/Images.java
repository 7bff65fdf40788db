package dev.thaw.image;

import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ThawFunction;

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

  /**
   * Checks a request against an image's function and host state ({@link ThawFunction#validate}), with no device
   * work: a restore need not start for a request the function would refuse.
   *
   * @throws InvalidRequestException if the function refuses it
   * @throws dev.thaw.image.restore.ImageRestoreException if the function class or its state cannot be loaded
   */
  public static void checkRequest(String tag, ImageManifest manifest, FunctionRequest request) {
    ThawFunction<?> function;
    Object state;
    try {
      function = FunctionLoader.load(manifest.function().className());
      state = HostStates.read(manifest.hostState(), function.stateType());
    } catch (IllegalArgumentException e) {
      throw new dev.thaw.image.restore.ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
    }
    validate(function, state, request);
  }

  @SuppressWarnings("unchecked")
  private static <S> void validate(ThawFunction<S> function, Object state, FunctionRequest request) {
    function.validate((S) state, request);
  }
}
