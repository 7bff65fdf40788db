package dev.thaw.bench.tp;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.LlamaRankFunction;
import dev.thaw.examples.llama.LlamaTensorParallel;
import dev.thaw.examples.llama.LlamaWeights;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.Chunker;
import dev.thaw.image.build.GroupImageBuilder;
import dev.thaw.image.restore.GroupRestorer;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.function.FunctionSession;
import java.io.IOException;
import java.util.List;

/**
 * A tensor-parallel Llama as a group image: built from weights split over devices in one process
 * ({@link LlamaTensorParallel#record}, profiled on a sample request, snapshotted per rank by
 * {@link GroupImageBuilder}), and cold-started from it ({@link GroupRestorer}, then
 * {@link LlamaTensorParallel#restored} over the rebuilt sessions).
 */
public final class TensorParallelImages {

  private TensorParallelImages() {}

  /** What a build made: the group committed, and the sample request's answer (ids, last logits). */
  public record Built(GroupImageBuilder.Result result, LlamaTensorParallel.Result sample) {}

  /**
   * Splits {@code weights} over {@code devices} in recording sessions, runs the sample request (greedy,
   * {@code sampleTokens} new ids per prompt) with every rank's launches profiled, and commits the group under
   * {@code tag}: rank r's image tagged {@link GroupImage#rankTag}. The sessions are freed when it returns.
   *
   * @param profile false leaves the images unprofiled: every launch of a restore then waits for all of its rank's
   *     bytes (correct, but nothing overlaps)
   */
  public static Built build(GpuDriver driver, int[] devices, LlamaWeights weights, int maxBatch, int maxTokens,
      int[][] samplePrompts, int sampleTokens, boolean profile, ChunkStore store, Chunker chunker, String tag,
      BuildOptions staging, ProgressListener progress) throws IOException {
    try (LlamaTensorParallel tp = LlamaTensorParallel.record(driver, devices, weights, maxBatch, maxTokens)) {
      LlamaTensorParallel.Result[] sample = new LlamaTensorParallel.Result[1];
      GroupImageBuilder.Recorded recorded = new GroupImageBuilder.Recorded() {
        @Override
        public int ranks() {
          return devices.length;
        }

        @Override
        public FunctionSession session(int rank) {
          return tp.session(rank);
        }

        @Override
        public Object rankState(int rank) {
          return tp.rankState(rank);
        }

        @Override
        public List<ImageManifest.Sample> runSamples() {
          sample[0] = tp.generate(samplePrompts, sampleTokens);
          return List.of(sample(samplePrompts, sampleTokens, sample[0].tokens()));
        }
      };
      GroupImageBuilder.Result result = new GroupImageBuilder(store, chunker).buildProfiled(tag,
          LlamaRankFunction.class.getName(), config(weights, devices.length, maxBatch, maxTokens), recorded, profile,
          staging, progress);
      return new Built(result, sample[0]);
    }
  }

  /** The sample request and the group's answer, as {@code LlamaFunction}'s token requests and responses read. */
  static ImageManifest.Sample sample(int[][] prompts, int newTokens, int[][] answer) {
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode ids = out.putArray("tokens");
    for (int[] row : answer) {
      ArrayNode a = ids.addArray();
      for (int id : row) {
        a.add(id);
      }
    }
    return new ImageManifest.Sample(TokenRequest.body(prompts, newTokens, false), out);
  }

  /** The group's config: the weights, the split and the sizes. */
  static JsonNode config(LlamaWeights weights, int ranks, int maxBatch, int maxTokens) {
    ObjectNode c = JsonNodeFactory.instance.objectNode();
    c.put("model", weights.config().name());
    c.put("weights", weights.describe());
    c.put("ranks", ranks);
    c.put("maxBatch", maxBatch);
    c.put("maxTokens", maxTokens);
    return c;
  }

  /** A cold-started group: the ranks' restores and the model running over their sessions. */
  public record Cold(GroupRestorer.GroupRestore restore, LlamaTensorParallel model) implements AutoCloseable {

    /** Closes the model, then every rank's restore (its copies waited for, its memory freed), even when one throws. */
    @Override
    public void close() {
      try {
        model.close();
      } finally {
        restore.close();
      }
    }
  }

  /**
   * Restores every rank at once ({@code plans} and {@code targets} by rank) and makes the model over the restored
   * sessions; a failure anywhere closes whatever was restored before it is thrown. The restores start with their
   * background streaming held back until the model has granted each rank's exchange buffers to the other ranks'
   * devices, so no peer grant changes a mapping while a restore copy into it is in flight; then they stream the rest
   * if {@code options} says so.
   */
  public static Cold start(GroupRestorer restorer, List<RestorePlan> plans, List<GroupRestorer.Target> targets,
      OnDemandOptions options) {
    return connect(restorer.restore(plans, targets, options.heldBack()), options);
  }

  /** As {@link #start}, from ranks {@link GroupRestorer#prepare prepared} ahead (their modules already loaded). */
  public static Cold startPrepared(GroupRestorer restorer, List<PreparedRestore> prepared,
      List<GroupRestorer.Target> targets, OnDemandOptions options) {
    return connect(restorer.restorePrepared(prepared, targets, options.heldBack()), options);
  }

  /** The model over the restored ranks; then the rest streams if {@code options} says so. */
  private static Cold connect(GroupRestorer.GroupRestore restore, OnDemandOptions options) {
    try {
      LlamaTensorParallel model = LlamaTensorParallel.restored(restore.sessions(),
          restore.states(LlamaRankFunction.State.class));
      if (options.streamInBackground()) {
        restore.streamRest();
      }
      return new Cold(restore, model);
    } catch (RuntimeException | Error e) {
      try {
        restore.close();
      } catch (RuntimeException c) {
        e.addSuppressed(c);
      }
      throw e;
    }
  }
}
