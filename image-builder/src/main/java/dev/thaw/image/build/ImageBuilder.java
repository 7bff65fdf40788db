package dev.thaw.image.build;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.staging.StagingRing;
import dev.thaw.image.ThawVersion;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.FunctionLoader;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.host.Threads;
import dev.thaw.runtime.speculation.AccessProfiler;
import dev.thaw.runtime.speculation.Profiling;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ModuleRecord;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxSyntaxException;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Builds an image: runs a function's {@code init} in a recording {@link FunctionSession}, runs the sample
 * requests, snapshots every allocation into the {@link ChunkStore} and commits the manifest under a tag.
 *
 * <p>The snapshot is a pipeline over {@link BuildOptions#stagingBuffers()} pinned staging buffers: the host
 * queues device → staging copies on a copy stream and records an event per buffer; a watcher thread waits for
 * each event in order and hands the staged segment to the hash pool, which cuts it into chunks, hashes them and
 * stores the ones the store lacks; the buffer goes back to the host when its last chunk is stored. So the copy
 * engine, the hash threads and the store all work at once, and memory use is fixed whatever the image size.
 *
 * <p>The manifest and tag are committed last, after {@link ChunkStore#sync()}: a build that fails anywhere
 * commits nothing (its stored chunks, if any, are garbage for {@link ChunkStore#collectGarbage()}).
 */
public final class ImageBuilder {

  private final ChunkStore store;
  private final Chunker chunker;

  public ImageBuilder(ChunkStore store, Chunker chunker) {
    this.store = store;
    this.chunker = chunker;
  }

  /**
   * Builds and commits an image in {@code context}; the function's session is closed at the end.
   *
   * @throws IllegalArgumentException for incomplete options or an invalid tag, before anything runs
   * @throws ImageBuildException if a phase fails, naming it; nothing is committed
   */
  public BuildResult build(BuildOptions options, GpuContext context, ProgressListener progress) {
    options.checkComplete();
    long start = System.nanoTime();
    ThawFunction<?> function;
    try {
      function = FunctionLoader.load(options.functionClass());
    } catch (IllegalArgumentException e) {
      throw new ImageBuildException("load", e.getMessage(), e);
    }
    double loadMs = millisSince(start);
    try (FunctionSession session = FunctionSession.record(context)) {
      return build(function, options, session, start, loadMs, progress);
    }
  }

  private <S> BuildResult build(ThawFunction<S> function, BuildOptions options, FunctionSession session,
      long start, double loadMs, ProgressListener progress) {
    String name = options.functionClass();
    long t = System.nanoTime();
    S state;
    try {
      state = function.init(session, options.config());
      session.synchronize();
    } catch (Exception e) {
      throw new ImageBuildException("init", "init of " + name + " failed: " + describe(e), e);
    }
    double initMs = millisSince(t);

    t = System.nanoTime();
    List<FunctionResponse> responses = new ArrayList<>();
    List<ImageManifest.Sample> samples = new ArrayList<>();
    List<JsonNode> requests = options.sampleRequests();
    // The sample requests are the profiling invocations: with validation on, they yield the access profile.
    // Exact recorded accesses on the sim device; speculation checked by PTX instrumentation on a GPU.
    AccessProfiler profiler = requests.isEmpty() ? null : Profiling.attach(session);
    for (int i = 0; i < requests.size(); i++) {
      try {
        FunctionResponse r = function.invoke(session, state, FunctionRequest.of(requests.get(i)));
        session.synchronize();
        responses.add(r);
        samples.add(new ImageManifest.Sample(requests.get(i), r.json()));
      } catch (Exception e) {
        throw new ImageBuildException("profile", "sample request " + (i + 1) + " of " + requests.size() + " to "
            + name + " failed: " + describe(e), e);
      }
    }
    ImageManifest.Profile profile = ImageManifest.Profile.empty();
    if (profiler != null) {
      try (profiler) {
        profile = ImageManifest.Profile.of(profiler.finish(options.tag()));
      }
    }
    double profileMs = millisSince(t);
    return commit(options, new ImageManifest.Function(name, options.config()), session, state, samples, profile,
        progress, new double[] {loadMs, initMs, profileMs}, start, responses);
  }

  /**
   * Snapshots {@code session}, initialized and profiled by its owner, into an image under {@code options}'s tag:
   * what {@link #build} does after the sample requests, for sessions that are not one function's alone (the ranks of
   * a tensor-parallel group, recorded together, each on its own device). The session stays the caller's.
   *
   * @param function the function class a restore instantiates and the config it records
   * @param state the host state, written with {@link HostStates#write}
   * @param profile the sample requests' access profile ({@link Profiling#attach} around them), or empty
   * @throws IllegalArgumentException for an invalid tag, before anything is stored
   * @throws ImageBuildException if the snapshot or the commit fails, naming it; nothing is committed
   */
  public BuildResult snapshot(BuildOptions options, ImageManifest.Function function, FunctionSession session,
      Object state, List<ImageManifest.Sample> samples, ImageManifest.Profile profile, ProgressListener progress) {
    BuildOptions.checkTag(options.tag());
    return commit(options, function, session, state, samples, profile, progress, new double[] {0, 0, 0},
        System.nanoTime(), List.of());
  }

  private BuildResult commit(BuildOptions options, ImageManifest.Function function, FunctionSession session,
      Object state, List<ImageManifest.Sample> samples, ImageManifest.Profile profile, ProgressListener progress,
      double[] loadInitProfileMs, long start, List<FunctionResponse> responses) {
    String name = function.className();
    long t;
    JsonNode hostState;
    try {
      hostState = HostStates.write(state);
    } catch (IllegalArgumentException e) {
      throw new ImageBuildException("snapshot", "the host state of " + name + " does not serialize: "
          + describe(e), e);
    }

    SessionTable table = session.table();
    t = System.nanoTime();
    Snapshot snap;
    try {
      snap = snapshot(session, table, options, progress);
    } catch (RuntimeException e) {
      throw new ImageBuildException("snapshot", "snapshot of " + name + " failed: " + describe(e), e);
    }
    double snapshotMs = millisSince(t);

    t = System.nanoTime();
    try {
      store.sync();
    } catch (RuntimeException e) {
      throw new ImageBuildException("commit", "the store could not make the chunks durable: " + describe(e), e);
    }
    double syncMs = millisSince(t);

    DeviceInfo device = session.context().device();
    ImageManifest.Device dev = new ImageManifest.Device(device.name(),
        device.computeCapabilityMajor() + "." + device.computeCapabilityMinor(), device.smArch(),
        session.context().driver().name());
    double buildMs = millisSince(start);
    ImageManifest.Build build = new ImageManifest.Build(Instant.now().toString(), ThawVersion.get(), buildMs,
        table.allocatedBytes(), snap.uniqueBytes, snap.chunkCount);
    ImageManifest manifest = new ImageManifest(ImageManifest.SCHEMA_VERSION, function, dev, snap.allocations,
        snap.modules, hostState, samples, build, profile);
    manifest.validate();

    t = System.nanoTime();
    try {
      store.commit(options.tag(), manifest.toBytes(), manifest.chunkDigests());
    } catch (RuntimeException e) {
      throw new ImageBuildException("commit", "committing " + options.tag() + " failed: " + describe(e), e);
    }
    double commitMs = millisSince(t);
    BuildTimings timings = new BuildTimings(loadInitProfileMs[0], loadInitProfileMs[1], loadInitProfileMs[2],
        snapshotMs, syncMs, commitMs, millisSince(start), table.allocatedBytes());
    return new BuildResult(options.tag(), manifest, timings, snap.newBytes.get(), responses);
  }

  // ---- the snapshot pipeline ----

  private static final class Snapshot {
    final List<ImageManifest.Allocation> allocations = new ArrayList<>();
    final List<ImageManifest.Module> modules = new ArrayList<>();
    final Set<Digest> seen = ConcurrentHashMap.newKeySet();
    final AtomicLong unique = new AtomicLong();
    final AtomicLong newBytes = new AtomicLong();
    long uniqueBytes;
    int chunkCount;
  }

  private Snapshot snapshot(FunctionSession session, SessionTable table, BuildOptions options,
      ProgressListener progress) {
    Snapshot snap = new Snapshot();
    for (ModuleRecord m : table.modules()) {
      snap.modules.add(module(m, snap));
    }
    session.synchronize();
    long largest = table.allocations().stream().mapToLong(AllocationRecord::size).max().orElse(0);
    if (largest > 0) {
      progress.start("snapshot", table.allocatedBytes());
      try {
        copyAllocations(session.context(), table, options, snap, progress,
            Math.min(options.stagingBytes(), largest));
      } finally {
        progress.finish();
      }
    }
    snap.uniqueBytes = snap.unique.get();
    snap.chunkCount = snap.seen.size();
    return snap;
  }

  private ImageManifest.Module module(ModuleRecord m, Snapshot snap) {
    byte[] cubin = m.cubin();
    if (cubin == null || cubin.length == 0) {
      throw new IllegalStateException("module " + m.name() + " has no cubin");
    }
    Digest digest = Digest.of(cubin);
    store(digest, ByteBuffer.wrap(cubin), snap);
    List<ImageManifest.Kernel> kernels = new ArrayList<>();
    Map<String, ParamLayout> entries;
    try {
      entries = PtxEntries.parse(m.ptx()).entries();
    } catch (PtxSyntaxException e) {
      throw new IllegalStateException("cannot read the kernel signatures of module " + m.name() + ": "
          + e.getMessage(), e);
    }
    entries.forEach((entry, layout) -> {
      List<ImageManifest.Param> params = new ArrayList<>();
      for (KernelParam p : layout.params()) {
        params.add(new ImageManifest.Param(p.name(), p.offset(), p.size(), p.type().name()));
      }
      kernels.add(new ImageManifest.Kernel(entry, layout.totalSize(), params));
    });
    return new ImageManifest.Module(m.name(), m.arch(), new ImageManifest.Blob(digest, cubin.length), m.ptx(),
        kernels);
  }

  private void store(Digest digest, ByteBuffer data, Snapshot snap) {
    if (snap.seen.add(digest)) {
      snap.unique.addAndGet(data.remaining());
      if (!store.contains(digest)) {
        store.putChunk(digest, data);
        snap.newBytes.addAndGet(data.remaining());
      }
    }
  }

  private record Segment(int allocation, long offset, int length) {}

  private void copyAllocations(GpuContext context, SessionTable table, BuildOptions options, Snapshot snap,
      ProgressListener progress, long stagingBytes) {
    ExecutorService watcher = Executors.newSingleThreadExecutor(Threads.daemonFactory("thaw-snapshot-copy"));
    ExecutorService hashers =
        Executors.newFixedThreadPool(options.hashThreads(), Threads.daemonFactory("thaw-snapshot-hash"));
    List<AutoCloseable> owned = new ArrayList<>();
    try {
      StagingRing staging = StagingRing.allocate(context, options.stagingBuffers(), Math.max(stagingBytes, 4096));
      owned.add(staging);
      GpuStream stream = context.createStream();
      owned.add(stream);
      AtomicReference<Throwable> failure = new AtomicReference<>();
      List<CompletableFuture<List<ImageManifest.Chunk>>> segments = new ArrayList<>();
      List<Segment> order = new ArrayList<>();
      for (int a = 0; a < table.allocations().size() && failure.get() == null; a++) {
        AllocationRecord alloc = table.allocations().get(a);
        for (long off = 0; off < alloc.size() && failure.get() == null; off += stagingBytes) {
          Segment seg = new Segment(a, off, (int) Math.min(stagingBytes, alloc.size() - off));
          // Every slot taken is released when its segment is stored or has failed, so this cannot wait forever.
          int slot = staging.acquire();
          PinnedBuffer buffer = staging.buffer(slot);
          stream.copyDeviceToHostAsync(buffer, 0, alloc.address() + seg.offset(), seg.length());
          staging.queued(slot, stream);
          // Copies complete in stream order, so one watcher waiting on the events in order loses nothing.
          CompletableFuture<List<ImageManifest.Chunk>> f = CompletableFuture
              .runAsync(() -> staging.awaitDevice(slot), watcher)
              .thenApplyAsync(v -> chunker.cut(buffer.slice(0, seg.length())), hashers)
              .thenCompose(lengths -> hashAndStore(buffer, seg, lengths, snap, progress, hashers));
          f.whenComplete((chunks, e) -> {
            if (e != null) {
              failure.compareAndSet(null, e);
            }
            staging.release(slot);
          });
          segments.add(f);
          order.add(seg);
        }
      }
      List<List<ImageManifest.Chunk>> perAllocation = new ArrayList<>();
      table.allocations().forEach(x -> perAllocation.add(new ArrayList<>()));
      for (int i = 0; i < segments.size(); i++) {
        perAllocation.get(order.get(i).allocation()).addAll(join(segments.get(i)));
      }
      if (failure.get() != null) {
        throw unwrap(failure.get());
      }
      for (int a = 0; a < table.allocations().size(); a++) {
        AllocationRecord r = table.allocations().get(a);
        snap.allocations.add(new ImageManifest.Allocation(r.name(), r.address(), r.size(), perAllocation.get(a)));
      }
    } finally {
      watcher.shutdownNow();
      hashers.shutdownNow();
      awaitQuietly(watcher);
      awaitQuietly(hashers);
      closeAll(owned);
    }
  }

  private CompletableFuture<List<ImageManifest.Chunk>> hashAndStore(PinnedBuffer staged, Segment seg, int[] lengths,
      Snapshot snap, ProgressListener progress, ExecutorService hashers) {
    List<CompletableFuture<ImageManifest.Chunk>> chunks = new ArrayList<>(lengths.length);
    int pos = 0;
    for (int length : lengths) {
      int at = pos;
      chunks.add(CompletableFuture.supplyAsync(() -> {
        ByteBuffer data = staged.slice(at, length);
        Digest digest = Digest.of(data);
        store(digest, data, snap);
        progress.advance(length);
        return new ImageManifest.Chunk(digest, seg.offset() + at, length);
      }, hashers));
      pos += length;
    }
    if (pos != seg.length()) {
      throw new IllegalStateException(chunker.describe() + " cut " + seg.length() + " bytes into chunks of " + pos);
    }
    return CompletableFuture.allOf(chunks.toArray(CompletableFuture[]::new))
        .thenApply(v -> chunks.stream().map(CompletableFuture::join).toList());
  }

  private static <T> T join(CompletableFuture<T> f) {
    try {
      return f.get();
    } catch (ExecutionException e) {
      throw unwrap(e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while snapshotting", e);
    }
  }

  private static RuntimeException unwrap(Throwable e) {
    while ((e instanceof CompletionException || e instanceof ExecutionException) && e.getCause() != null) {
      e = e.getCause();
    }
    return e instanceof RuntimeException r ? r : new IllegalStateException(e.toString(), e);
  }

  private static void awaitQuietly(ExecutorService pool) {
    try {
      pool.awaitTermination(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void closeAll(List<AutoCloseable> owned) {
    for (int i = owned.size() - 1; i >= 0; i--) {
      try {
        owned.get(i).close();
      } catch (Exception e) {
        // Teardown after a failure must not hide the failure; a leak is reported by the driver's cleaner.
      }
    }
  }

  private static double millisSince(long startNanos) {
    return (System.nanoTime() - startNanos) / 1e6;
  }

  static String describe(Throwable e) {
    String m = e.getMessage();
    return m == null || m.isBlank() ? e.getClass().getSimpleName() : m;
  }
}
