package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;

/**
 * A model made ready for the contenders: its weights on disk, its request in a file, Thaw's image in the store.
 *
 * @param workload the model
 * @param sweep whether it is in the run only for the image-size sweep
 * @param request the request file every contender reads
 * @param weights the weights every contender loads: a Hugging Face folder (GPT-2) or a safetensors file (MLP)
 * @param weightsBytes their size
 * @param tag the tag of Thaw's image of it, or null when the build failed
 * @param imageBytes device memory in that image, or null
 * @param buildAnswer the answer {@code thaw build} recorded for the request, or null
 * @param buildSimulated whether the build ran on the simulated device, or null
 * @param buildError why the build failed, or null
 */
record PreparedModel(Workload workload, boolean sweep, Path request, Path weights, long weightsBytes, String tag,
    Long imageBytes, JsonNode buildAnswer, Boolean buildSimulated, String buildError) {

  /** The image's tag, for a contender that needs it. */
  String requireTag() throws Contender.ContenderException {
    if (tag == null) {
      throw new Contender.ContenderException("no image to start from: thaw build failed: " + buildError);
    }
    return tag;
  }
}
