package dev.thaw.pool.worker;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.GroupRestorer;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.protocol.WorkerMessages.BecomeGroup;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import dev.thaw.pool.protocol.WorkerMessages.Resident;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A worker's group instance (BECOME_GROUP): the ranks of a group image restored at once, rank 0 into this worker's
 * context, rank r into a context of this process on rank r's device (the one this worker's helper link to that device
 * opened at start, so no context is made on the cold path; else a new one), each from its own host-cache placement
 * through its own device's link, and the group's function ({@link dev.thaw.runtime.function.GroupFunction}) serving
 * over their sessions. All ranks live in this one process: their recorded addresses are disjoint (they were recorded
 * in one process too), and the group's exchanges are peer reads between its contexts.
 *
 * <p>Invariants: the contexts and restore resources this group made or took are its own, closed with it, after its
 * restores; a group is never recycled (the worker that became one exits when released); a failed start closes
 * everything it made before the failure is thrown.
 */
final class WorkerGroup implements AutoCloseable {

  private final GroupRestorer.Serving serving;
  /** The contexts and resources of ranks 1..n−1, this group's to close. */
  private final List<GpuContext> contexts;
  private final List<RestoreResources> resources;
  private final long totalBytes;
  private final String from;
  private boolean closed;

  private WorkerGroup(GroupRestorer.Serving serving, List<GpuContext> contexts, List<RestoreResources> resources,
      long totalBytes, String from) {
    this.serving = serving;
    this.contexts = contexts;
    this.resources = resources;
    this.totalBytes = totalBytes;
    this.from = from;
  }

  /** What a group start needs of its worker. */
  record Worker(GpuDriver driver, GpuContext context, RestoreResources resources, HostCacheView cache,
      WorkerStores stores, WorkerHelpers helpers) {}

  /**
   * Restores the group {@code b} names, its body holding each rank's manifest and placement; the phases it took go
   * into {@code phases} ({@code prepared} or {@code manifests} and {@code placement}, {@code rank contexts},
   * {@code store}, {@code restore} — every rank mapped, its modules loaded (unless prepared) and its state read, the
   * group assembled — and, when asked, {@code resident}).
   *
   * @param ready the group this worker prepared for these devices ({@link PreparedImages#prepare}), now this start's
   *     (closed if it fails), or null
   * @throws ImageRestoreException if the ranks or body are not a group this worker can start, naming why
   */
  static WorkerGroup become(BecomeGroup b, byte[] body, PreparedImages.Prepared ready, Worker w,
      Map<String, Double> phases) {
    List<GroupRank> ranks = b.ranks();
    int n = ranks.size();
    PreparedImages.Group g = ready == null ? null : ready.group();
    List<ImageManifest> manifests = new ArrayList<>(n);
    List<RestoreSource> sources = new ArrayList<>(n);
    List<byte[][]> parts;
    boolean cached = true;
    long t = System.nanoTime();
    // Until the restore below takes it, the prepared group (its contexts on other devices) is this start's to close.
    try {
      check(b, w);
      if (ready != null && (g == null || !Arrays.equals(g.devices(), ranks.stream().mapToInt(GroupRank::device)
          .toArray()))) {
        throw new ImageRestoreException("BECOME_GROUP names prepared '" + b.prepared() + "', which was not prepared "
            + "for devices " + ranks.stream().map(GroupRank::device).toList(), null);
      }
      parts = split(ranks, body);
      for (int r = 0; r < n; r++) {
        if (g == null && parts.get(r)[0].length == 0) {
          throw new ImageRestoreException("rank " + r + " comes without its manifest, and this worker prepared no "
              + "group", null);
        }
        manifests.add(g != null ? g.manifests().get(r) : ImageManifest.read(parts.get(r)[0]));
      }
      t = WorkerMain.phase(phases, g != null ? "prepared" : "manifests", t);
      for (int r = 0; r < n; r++) {
        boolean fromCache = ranks.get(r).source().kind().equals("cache");
        cached &= fromCache;
        if (!fromCache) {
          sources.add(RestoreSource.STORE_ONLY);
          continue;
        }
        // The placement it was prepared with holds unless the cache moved the rank's image since.
        byte[] placement = parts.get(r)[1];
        PinnedChunks chunks = g != null && g.chunks().get(r) != null && Arrays.equals(placement,
            g.placements().get(r)) ? g.chunks().get(r) : HostPlacements.chunks(w.cache(), placement);
        sources.add(HostPlacements.hostTier(chunks));
      }
      t = WorkerMain.phase(phases, "placement", t);
    } catch (RuntimeException | Error e) {
      if (ready != null) {
        ready.close();
      }
      throw e;
    }
    List<GpuContext> contexts = new ArrayList<>(g != null ? g.contexts() : List.of());
    List<RestoreResources> resources = new ArrayList<>(g != null ? g.resources() : List.of());
    List<PreparedRestore> prepared = g != null ? g.ranks() : null;
    boolean serving = false;
    WorkerGroup group;
    try {
      List<GroupRestorer.Target> targets = new ArrayList<>(n);
      targets.add(new GroupRestorer.Target(w.context(), sources.get(0), w.resources()));
      for (int r = 1; r < n; r++) {
        if (g == null) {
          int device = ranks.get(r).device();
          GpuContext c = w.helpers() == null ? null : w.helpers().take(device);
          c = c != null ? c : w.driver().createContext(device);
          contexts.add(c);
          resources.add(RestoreResources.create(c));
        }
        targets.add(new GroupRestorer.Target(contexts.get(r - 1), sources.get(r), resources.get(r - 1)));
      }
      t = WorkerMain.phase(phases, "rank contexts", t);
      RocksChunkStore store = ready != null ? ready.store()
          : w.stores().storeFor(ranks.get(0).source(), ranks.get(0).tag(), parts.get(0)[0]);
      t = WorkerMain.phase(phases, "store", t);
      serving = true;
      GroupRestorer.Serving started = new GroupRestorer(store).serve(manifests.stream().map(RestorePlan::of).toList(),
          prepared, targets, new OnDemandOptions());
      t = WorkerMain.phase(phases, "restore", t);
      group = new WorkerGroup(started, contexts, resources,
          manifests.stream().mapToLong(ImageManifest::totalBytes).sum(), cached ? "cache" : "store");
    } catch (RuntimeException | Error e) {
      // Prepared ranks no restore started with still hold their modules; once serving began, it closed them.
      if (prepared != null && !serving) {
        prepared.forEach(PreparedRestore::close);
      }
      closeAll(resources, contexts, e);
      throw e;
    }
    if (b.awaitResident()) {
      try {
        group.awaitResident();
      } catch (RuntimeException e) {
        group.close();
        throw e;
      }
      WorkerMain.phase(phases, "resident", t);
    }
    return group;
  }

  /** Each rank's manifest and placement out of a group's body, rank r's at r, as the ranks' lengths say. */
  static List<byte[][]> split(List<GroupRank> ranks, byte[] body) {
    List<byte[][]> out = new ArrayList<>();
    int at = 0;
    for (int r = 0; r < ranks.size(); r++) {
      GroupRank g = ranks.get(r);
      if (g.manifestBytes() < 0 || g.placementBytes() < 0
          || (long) at + g.manifestBytes() + g.placementBytes() > body.length) {
        throw new ImageRestoreException("rank " + r + " says its manifest has " + g.manifestBytes()
            + " bytes and its placement " + g.placementBytes() + ", past the body's " + body.length, null);
      }
      byte[] m = Arrays.copyOfRange(body, at, at + g.manifestBytes());
      at += g.manifestBytes();
      byte[] p = Arrays.copyOfRange(body, at, at + g.placementBytes());
      at += g.placementBytes();
      out.add(new byte[][] {m, p});
    }
    if (at != body.length) {
      throw new ImageRestoreException("the group's ranks add up to " + at + " bytes of the body's " + body.length,
          null);
    }
    return out;
  }

  private static void check(BecomeGroup b, Worker w) {
    List<GroupRank> ranks = b.ranks();
    if (ranks.size() < 2) {
      throw new ImageRestoreException("a group has two ranks or more, not " + ranks.size(), null);
    }
    int own = w.context().device().ordinal();
    if (ranks.get(0).device() != own) {
      throw new ImageRestoreException("rank 0 goes to device " + ranks.get(0).device() + ", and this worker runs on "
          + own, null);
    }
    Set<Integer> seen = new HashSet<>();
    int devices = w.driver().devices().size();
    for (int r = 0; r < ranks.size(); r++) {
      GroupRank g = ranks.get(r);
      if (g.device() < 0 || g.device() >= devices || !seen.add(g.device())) {
        throw new ImageRestoreException("rank " + r + "'s device " + g.device() + " is " + (g.device() < 0
            || g.device() >= devices ? "not one of this node's " + devices : "another rank's too"), null);
      }
      if (g.source() == null) {
        throw new ImageRestoreException("rank " + r + " names no source", null);
      }
      if (g.source().kind().equals("cache") && w.cache() == null) {
        throw new ImageRestoreException("rank " + r + " is placed in the host cache, and this worker maps none",
            null);
      }
    }
  }

  FunctionResponse invoke(FunctionRequest request, ResponseStream stream) {
    return serving.group().invoke(request, stream);
  }

  long totalBytes() {
    return totalBytes;
  }

  /** {@code cache} or {@code store}: where the ranks' bytes came from (a rank from the store makes it {@code store}). */
  String from() {
    return from;
  }

  boolean isResident() {
    return serving.restore().ranks().stream().allMatch(OnDemandRestore::isResident);
  }

  /**
   * Completes when every rank's last byte landed; fails as soon as a rank's restore does, naming that rank (the
   * failure's kind is its cause's, a corrupt chunk's say).
   */
  CompletableFuture<Void> resident() {
    List<OnDemandRestore> ranks = serving.restore().ranks();
    CompletableFuture<Void> all = new CompletableFuture<>();
    AtomicInteger left = new AtomicInteger(ranks.size());
    for (int r = 0; r < ranks.size(); r++) {
      int rank = r;
      ranks.get(r).resident().whenComplete((ok, e) -> {
        if (e != null) {
          all.completeExceptionally(rankFailed(rank, WorkerFailures.unwrap(e)));
        } else if (left.decrementAndGet() == 0) {
          all.complete(null);
        }
      });
    }
    return all;
  }

  /** Blocks until every rank is resident; a rank's failure is thrown naming the rank. */
  private void awaitResident() {
    List<OnDemandRestore> ranks = serving.restore().ranks();
    for (int r = 0; r < ranks.size(); r++) {
      try {
        ranks.get(r).awaitResident();
      } catch (RuntimeException e) {
        throw rankFailed(r, e);
      }
    }
  }

  private static ImageRestoreException rankFailed(int rank, Throwable e) {
    return new ImageRestoreException("rank " + rank + ": " + e.getMessage(), e);
  }

  /** RESIDENT's report for the whole group: bytes and copies summed over the ranks, the last rank's landing. */
  Resident residentReport(long becomeStartNanos) {
    long bytes = 0;
    long host = 0;
    long store = 0;
    long resident = 0;
    int copies = 0;
    int promotions = 0;
    long waits = 0;
    long peer = 0;
    long helper = 0;
    long last = becomeStartNanos;
    for (OnDemandRestore r : serving.restore().ranks()) {
      OnDemandRestore.Stats s = r.stats();
      bytes += s.bytes();
      host += s.hostBytes();
      store += s.storeBytes();
      resident += s.residentBytes();
      copies += s.copies();
      promotions += s.promotions();
      waits += s.waits();
      peer += s.peerBytes();
      helper += s.helperBytes();
      last = Math.max(last, r.residentNanos());
    }
    return new Resident((last - becomeStartNanos) / 1e6, bytes, host, store, resident, copies, promotions, waits,
        peer, helper);
  }

  /** Closes the group, every rank's restore, then the contexts and resources it made. Idempotent. */
  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    RuntimeException first = null;
    try {
      serving.close();
    } catch (RuntimeException e) {
      first = e;
    }
    closeAll(resources, contexts, first);
    if (first != null) {
      throw first;
    }
  }

  private static void closeAll(List<RestoreResources> resources, List<GpuContext> contexts, Throwable into) {
    for (RestoreResources r : resources) {
      try {
        r.close();
      } catch (RuntimeException e) {
        if (into != null) {
          into.addSuppressed(e);
        }
      }
    }
    for (GpuContext c : contexts) {
      try {
        c.close();
      } catch (RuntimeException e) {
        if (into != null) {
          into.addSuppressed(e);
        }
      }
    }
  }
}
