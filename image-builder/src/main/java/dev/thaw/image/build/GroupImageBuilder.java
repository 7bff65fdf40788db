package dev.thaw.image.build;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.speculation.AccessProfiler;
import dev.thaw.runtime.speculation.Profiling;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Snapshots the ranks of a tensor-parallel group, recorded together in one process on their own devices, into a
 * {@link GroupImage}: one image per rank, the ranks snapshotted at once (each device's link and staging its own, the
 * hashing and the store shared), rank 0 committed last, once every other rank is. A build that fails anywhere deletes
 * the rank tags it committed, so no group is left half built under its tag.
 */
public final class GroupImageBuilder {

  /**
   * One rank, initialized and profiled by its owner.
   *
   * @param session the rank's recording session (the caller's)
   * @param state its host state, which a restore reads back into the function's state type
   * @param profile the sample requests' access profile of this rank's session, or empty
   */
  public record Rank(FunctionSession session, Object state, ImageManifest.Profile profile) {}

  /** What a group build committed: the group and each rank's build, by rank, and its wall time. */
  public record Result(GroupImage group, List<BuildResult> ranks, double millis) {

    public Result {
      ranks = List.copyOf(ranks);
    }

    /** Bytes of every rank's allocations. */
    public long totalBytes() {
      return ranks.stream().mapToLong(r -> r.manifest().totalBytes()).sum();
    }
  }

  /** A group its owner recorded, one recording session per rank on the rank's device, and its sample requests. */
  public interface Recorded {
    int ranks();

    FunctionSession session(int rank);

    /** Rank {@code rank}'s host state, which its image records. */
    Object rankState(int rank);

    /** Runs the sample requests on every rank; returns them with the group's answers. */
    List<ImageManifest.Sample> runSamples();
  }

  private final ChunkStore store;
  private final ImageBuilder builder;

  public GroupImageBuilder(ChunkStore store, Chunker chunker) {
    this.store = store;
    this.builder = new ImageBuilder(store, chunker);
  }

  /**
   * Runs {@code group}'s sample requests with every rank's launches profiled (when {@code profile}; unprofiled, every
   * launch of a restore waits for all of its rank's bytes: correct, but nothing overlaps), then {@link #build}s it.
   */
  public Result buildProfiled(String tag, String functionClass, JsonNode config, Recorded group, boolean profile,
      BuildOptions staging, ProgressListener progress) {
    int n = group.ranks();
    List<AccessProfiler> profilers = new ArrayList<>();
    List<Rank> ranks = new ArrayList<>();
    List<ImageManifest.Sample> samples;
    try {
      if (profile) {
        for (int r = 0; r < n; r++) {
          profilers.add(Profiling.attach(group.session(r)));
        }
      }
      samples = group.runSamples();
      for (int r = 0; r < n; r++) {
        ranks.add(new Rank(group.session(r), group.rankState(r), profile
            ? ImageManifest.Profile.of(profilers.get(r).finish(GroupImage.rankTag(tag, r)))
            : ImageManifest.Profile.empty()));
      }
    } finally {
      profilers.forEach(AccessProfiler::close);
    }
    return build(tag, functionClass, config, ranks, samples, staging, progress);
  }

  /**
   * Builds the group a {@link GroupFunction#record recording} holds, over {@code ranks} ranks: {@code sampleRequests}
   * run through it (as the restored group will answer them) with every rank's launches profiled, then
   * {@link #build}, the recording's config the group's. The recording stays the caller's to close.
   *
   * @throws ImageBuildException in phase {@code profile} naming the sample request that failed, or as {@link #build}
   */
  public Result build(String tag, String functionClass, GroupFunction.Recording recording, int ranks,
      List<JsonNode> sampleRequests, BuildOptions staging, ProgressListener progress) {
    return buildProfiled(tag, functionClass, recording.config(), new Recorded() {
      @Override
      public int ranks() {
        return ranks;
      }

      @Override
      public FunctionSession session(int rank) {
        return recording.session(rank);
      }

      @Override
      public Object rankState(int rank) {
        return recording.rankState(rank);
      }

      @Override
      public List<ImageManifest.Sample> runSamples() {
        List<ImageManifest.Sample> out = new ArrayList<>();
        for (int i = 0; i < sampleRequests.size(); i++) {
          JsonNode request = sampleRequests.get(i);
          try {
            out.add(new ImageManifest.Sample(request, recording.invoke(FunctionRequest.of(request)).json()));
          } catch (RuntimeException e) {
            throw new ImageBuildException("profile", "sample request " + (i + 1) + " of " + sampleRequests.size()
                + " failed: " + e.getMessage(), e);
          }
        }
        return out;
      }
    }, true, staging, progress);
  }

  /**
   * Commits the group tagged {@code tag}: rank r's session as an image of {@code functionClass} tagged
   * {@link GroupImage#rankTag}, its function config the group manifest.
   *
   * @param staging the staging and hashing of each rank's snapshot (its tag is not used)
   * @param samples the sample requests and the group's answers, recorded in every rank's manifest
   * @throws IllegalArgumentException for an invalid tag or fewer than two ranks, before anything is stored
   * @throws ImageBuildException naming the rank whose snapshot or commit failed; nothing of the group stays tagged
   */
  public Result build(String tag, String functionClass, JsonNode config, List<Rank> ranks,
      List<ImageManifest.Sample> samples, BuildOptions staging, ProgressListener progress) {
    long start = System.nanoTime();
    List<Integer> devices = ranks.stream().map(r -> r.session().context().device().ordinal()).toList();
    GroupImage group = GroupImage.of(tag, UUID.randomUUID().toString(), devices, config);
    int n = ranks.size();
    BuildResult[] built = new BuildResult[n];
    List<String> committed = new ArrayList<>();
    ExecutorService threads = Executors.newFixedThreadPool(n, Threads.daemonFactory("thaw-group-snapshot"));
    try {
      List<Future<BuildResult>> others = new ArrayList<>();
      for (int r = 1; r < n; r++) {
        int rank = r;
        others.add(threads.submit(() -> snapshot(group, functionClass, ranks.get(rank), rank, samples, staging,
            ProgressListener.NONE)));
      }
      ImageBuildException failure = null;
      for (int r = 1; r < n; r++) {
        try {
          built[r] = others.get(r - 1).get();
          committed.add(group.rankTags().get(r));
        } catch (ExecutionException e) {
          ImageBuildException f = failed(group, r, e.getCause());
          if (failure == null) {
            failure = f;
          } else {
            failure.addSuppressed(f);
          }
        }
      }
      if (failure != null) {
        throw failure;
      }
      try {
        built[0] = snapshot(group, functionClass, ranks.get(0), 0, samples, staging, progress);
      } catch (RuntimeException e) {
        throw failed(group, 0, e);
      }
      committed.clear();
      return new Result(group, List.of(built), (System.nanoTime() - start) / 1e6);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new ImageBuildException("snapshot", "interrupted while snapshotting group '" + tag + "'", e);
    } finally {
      threads.shutdownNow();
      for (String t : committed) {
        store.delete(t);
      }
    }
  }

  private BuildResult snapshot(GroupImage group, String functionClass, Rank rank, int r,
      List<ImageManifest.Sample> samples, BuildOptions staging, ProgressListener progress) {
    BuildOptions options = new BuildOptions().setTag(group.rankTags().get(r))
        .setStagingBuffers(staging.stagingBuffers()).setStagingBytes(staging.stagingBytes())
        .setHashThreads(staging.hashThreads());
    return builder.snapshot(options, new ImageManifest.Function(functionClass, group.rankConfig(r)),
        rank.session(), rank.state(), samples, rank.profile(), progress);
  }

  private static ImageBuildException failed(GroupImage group, int rank, Throwable cause) {
    String phase = cause instanceof ImageBuildException b ? b.phase() : "snapshot";
    return new ImageBuildException(phase, "rank " + rank + " of group '" + group.tag() + "' ("
        + group.rankTags().get(rank) + "): " + ImageBuilder.describe(cause), cause);
  }
}
