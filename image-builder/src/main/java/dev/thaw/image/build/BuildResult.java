package dev.thaw.image.build;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.FunctionResponse;
import java.util.List;

/**
 * A committed image.
 *
 * @param tag what it was committed under
 * @param manifest what was committed
 * @param timings where the time went
 * @param newBytes chunk bytes this build added to the store (the rest were there already)
 * @param sampleResponses the function's response to each sample request, in order
 */
public record BuildResult(String tag, ImageManifest manifest, BuildTimings timings, long newBytes,
    List<FunctionResponse> sampleResponses) {

  public BuildResult {
    sampleResponses = List.copyOf(sampleResponses);
  }
}
