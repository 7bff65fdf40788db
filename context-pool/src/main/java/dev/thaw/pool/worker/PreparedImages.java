package dev.thaw.pool.worker;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.GroupRestorer;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages.Forget;
import dev.thaw.pool.protocol.WorkerMessages.ForgetAnswer;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import dev.thaw.pool.protocol.WorkerMessages.Prepare;
import dev.thaw.pool.protocol.WorkerMessages.PrepareAnswer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The images a blank worker holds prepared ({@link OnDemandRestorer#prepare}: manifest parsed, restore planned,
 * function class loaded, host state read, modules loaded), so that becoming one only maps and copies. At most a
 * PREPARE's {@code keep} are held, least recently prepared dropped first; every drop is told to the parent (in the
 * PREPARE's or FORGET's answer), so the parent never names an image its worker no longer holds. Executing thread
 * only.
 */
final class PreparedImages {

  /**
   * One prepared image: the restore made ready ahead, the placement it was prepared with (and the chunks it resolves
   * to in this worker's view of the arena; null without one), and the store it was checked against.
   */
  record Prepared(String key, String name, byte[] manifest, PreparedRestore restore, byte[] placement,
      PinnedChunks chunks, RocksChunkStore store, Group group) {

    Prepared(String key, String name, byte[] manifest, PreparedRestore restore, byte[] placement, PinnedChunks chunks,
        RocksChunkStore store) {
      this(key, name, manifest, restore, placement, chunks, store, null);
    }

    /** Unloads its modules (every rank's, for a group) and closes what a group made on other devices. */
    void close() {
      restore.close();
      if (group != null) {
        group.close();
      }
    }
  }

  /**
   * A group prepared whole: rank r for device {@code devices[r]} (rank 0 in this worker's context, the others each in a
   * context of this group's own on its device, with its restore resources), its manifest and placement; rank 0's are
   * the {@link Prepared}'s own. The ranks 1..n−1 here are this group's to close until a BECOME_GROUP takes them.
   */
  record Group(int[] devices, List<ImageManifest> manifests, List<byte[]> placements, List<PinnedChunks> chunks,
      List<PreparedRestore> ranks, List<GpuContext> contexts, List<RestoreResources> resources) {

    /** Closes the ranks 1..n−1 (rank 0's restore is the {@link Prepared}'s) and their contexts and resources. */
    void close() {
      for (int r = 1; r < ranks.size(); r++) {
        ranks.get(r).close();
      }
      resources.forEach(RestoreResources::close);
      contexts.forEach(GpuContext::close);
    }
  }

  private final GpuDriver driver;
  private final GpuContext context;
  private final HostCacheView cache;
  private final WorkerStores stores;
  /** By key, least recently prepared first. */
  private final LinkedHashMap<String, Prepared> byKey = new LinkedHashMap<>();

  PreparedImages(GpuDriver driver, GpuContext context, HostCacheView cache, WorkerStores stores) {
    this.driver = driver;
    this.context = context;
    this.cache = cache;
    this.stores = stores;
  }

  /** Adds images prepared at start (before READY, which names their keys). */
  void addAll(List<Prepared> images) {
    images.forEach(p -> byKey.put(p.key(), p));
  }

  List<String> keys() {
    return List.copyOf(byKey.keySet());
  }

  /**
   * Prepares an image ahead of its BECOME: the body is its manifest, then its placement in the host cache (maybe
   * none). An image prepared already (at start, before it was staged) only learns its new placement.
   */
  PrepareAnswer prepare(Prepare p, byte[] body) throws Exception {
    if (p.key().isEmpty()) {
      throw new ProtocolException("PREPARE without a key");
    }
    if (!p.ranks().isEmpty()) {
      return keep(p, prepareGroup(p, body));
    }
    if (p.manifestBytes() < 0 || p.manifestBytes() > body.length) {
      throw new ImageRestoreException("PREPARE says its manifest has " + p.manifestBytes() + " of the body's "
          + body.length + " bytes", null);
    }
    long start = System.nanoTime();
    byte[] manifest = p.manifestBytes() == body.length ? body : Arrays.copyOf(body, p.manifestBytes());
    byte[] placement = Arrays.copyOfRange(body, p.manifestBytes(), body.length);
    Map<String, Double> phases = new LinkedHashMap<>();
    Prepared known = byKey.remove(p.key());
    Prepared made;
    if (known != null && known.group() == null && Arrays.equals(known.manifest(), manifest)) {
      PinnedChunks chunks = chunks(placement);
      long t = WorkerMain.phase(phases, "placement", start);
      made = new Prepared(p.key(), p.name(), manifest, known.restore(), placement, chunks, known.store());
      HostPlacements.resolveAhead(chunks, known.restore().plan().manifest());
      WorkerMain.phase(phases, "resolve", t);
    } else {
      if (known != null) {
        known.close();
      }
      made = prepareNew(p, manifest, placement, phases, start);
      // The garbage of parsing goes now, while idle, not in the middle of the cold start that follows.
      System.gc();
    }
    phases.put("total", (System.nanoTime() - start) / 1e6);
    return keep(p, new Made(made, phases));
  }

  private record Made(Prepared prepared, Map<String, Double> phases) {}

  /** Holds {@code made}, dropping the least recently prepared beyond the PREPARE's {@code keep}. */
  private PrepareAnswer keep(Prepare p, Made made) {
    byKey.put(p.key(), made.prepared());
    List<String> dropped = new ArrayList<>();
    while (byKey.size() > Math.max(1, p.keep())) {
      String eldest = byKey.keySet().iterator().next();
      byKey.remove(eldest).close();
      dropped.add(eldest);
    }
    return new PrepareAnswer(made.phases(), dropped);
  }

  /**
   * Prepares a group for the devices its PREPARE names, rank r's at r (rank 0's this worker's own): every rank's
   * manifest parsed and placement resolved, a context and restore resources made on each other rank's device, and
   * every rank's function, state and modules loaded there at once ({@link GroupRestorer#prepare}). A group prepared
   * under this key already is prepared again (its placements may have moved).
   */
  private Made prepareGroup(Prepare p, byte[] body) {
    long start = System.nanoTime();
    Map<String, Double> phases = new LinkedHashMap<>();
    List<GroupRank> ranks = p.ranks();
    int n = ranks.size();
    if (n < 2 || ranks.get(0).device() != context.device().ordinal()) {
      throw new ImageRestoreException("a group PREPARE names " + n + " ranks, rank 0 on device "
          + (n == 0 ? "none" : ranks.get(0).device()) + "; this worker runs on " + context.device().ordinal(), null);
    }
    Prepared known = byKey.remove(p.key());
    if (known != null) {
      known.close();
    }
    List<byte[][]> parts = WorkerGroup.split(ranks, body);
    List<ImageManifest> manifests = new ArrayList<>();
    for (byte[][] part : parts) {
      manifests.add(ImageManifest.read(part[0]));
    }
    long t = WorkerMain.phase(phases, "manifests", start);
    List<PinnedChunks> chunks = new ArrayList<>();
    for (byte[][] part : parts) {
      chunks.add(chunks(part[1]));
    }
    t = WorkerMain.phase(phases, "placement", t);
    RocksChunkStore store = stores.storeFor(null, ranks.get(0).tag(), parts.get(0)[0]);
    t = WorkerMain.phase(phases, "store", t);
    List<GpuContext> contexts = new ArrayList<>();
    List<RestoreResources> resources = new ArrayList<>();
    try {
      List<GroupRestorer.Target> targets = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        GpuContext c = context;
        if (r > 0) {
          c = driver.createContext(ranks.get(r).device());
          contexts.add(c);
          resources.add(RestoreResources.create(c));
        }
        targets.add(new GroupRestorer.Target(c, chunks.get(r) == null ? RestoreSource.STORE_ONLY
            : HostPlacements.hostTier(chunks.get(r)), r == 0 ? null : resources.get(r - 1)));
      }
      t = WorkerMain.phase(phases, "rank contexts", t);
      List<PreparedRestore> prepared = new GroupRestorer(store).prepare(
          manifests.stream().map(RestorePlan::of).toList(), targets);
      WorkerMain.phase(phases, "class, state, modules", t);
      int[] devices = ranks.stream().mapToInt(GroupRank::device).toArray();
      Group group = new Group(devices, List.copyOf(manifests), parts.stream().map(x -> x[1]).toList(),
          chunks, prepared, List.copyOf(contexts), List.copyOf(resources));
      phases.put("total", (System.nanoTime() - start) / 1e6);
      System.gc();
      return new Made(new Prepared(p.key(), p.name(), parts.get(0)[0], prepared.get(0), parts.get(0)[1],
          chunks.get(0), store, group), phases);
    } catch (RuntimeException | Error e) {
      resources.forEach(RestoreResources::close);
      contexts.forEach(GpuContext::close);
      throw e;
    }
  }

  private Prepared prepareNew(Prepare p, byte[] manifestBytes, byte[] placement, Map<String, Double> phases,
      long start) throws Exception {
    ImageManifest manifest = ImageManifest.read(manifestBytes);
    long t = WorkerMain.phase(phases, "manifest", start);
    PinnedChunks chunks = chunks(placement);
    t = WorkerMain.phase(phases, "placement", t);
    RocksChunkStore store = stores.storeFor(null, p.name(), manifestBytes);
    t = WorkerMain.phase(phases, "store", t);
    RestoreSource tiers = chunks == null ? RestoreSource.STORE_ONLY : HostPlacements.hostTier(chunks);
    PreparedRestore restore = new OnDemandRestorer(store).prepare(RestorePlan.of(manifest), context, tiers);
    t = WorkerMain.phase(phases, "class, state, modules", t);
    HostPlacements.resolveAhead(chunks, manifest);
    WorkerMain.phase(phases, "resolve", t);
    return new Prepared(p.key(), p.name(), manifestBytes, restore, placement, chunks, store);
  }

  private PinnedChunks chunks(byte[] placement) {
    return placement.length == 0 || cache == null ? null : HostPlacements.chunks(cache, placement);
  }

  /** Drops the images the FORGET names; the answer says which of them were held. */
  ForgetAnswer forget(Forget f) {
    List<String> dropped = new ArrayList<>();
    for (String key : f.keys()) {
      Prepared p = byKey.remove(key);
      if (p != null) {
        p.close();
        dropped.add(key);
      }
    }
    return new ForgetAnswer(dropped);
  }

  /** The prepared image under {@code key}, no longer held here (the BECOME owns it now), or null. */
  Prepared take(String key) {
    return byKey.remove(key);
  }

  /** Drops every prepared image: the worker became one, for life. */
  void closeAll() {
    byKey.values().forEach(Prepared::close);
    byKey.clear();
  }
}
