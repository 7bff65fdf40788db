package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ThawFunction;

/** A request checked against an image's function before a restore starts for it. */
public final class RequestValidation {

  private RequestValidation() {}

  /**
   * Checks a request against an image's function and host state ({@link ThawFunction#validate}), with no device
   * work: a restore need not start for a request the function would refuse.
   *
   * @throws InvalidRequestException if the function refuses it
   * @throws ImageRestoreException if the function class or its state cannot be loaded
   */
  public static void check(String tag, ImageManifest manifest, FunctionRequest request) {
    ThawFunction<?> function;
    Object state;
    try {
      function = FunctionLoader.load(manifest.function().className());
      state = HostStates.read(manifest.hostState(), function.stateType());
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("image '" + tag + "': " + e.getMessage(), e);
    }
    validate(function, state, request);
  }

  @SuppressWarnings("unchecked")
  private static <S> void validate(ThawFunction<S> function, Object state, FunctionRequest request) {
    function.validate((S) state, request);
  }
}
