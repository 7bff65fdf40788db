package dev.thaw.pool.worker;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages.Forget;
import dev.thaw.pool.protocol.WorkerMessages.ForgetAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Prepare;
import dev.thaw.pool.protocol.WorkerMessages.PrepareAnswer;
import dev.thaw.runtime.gpu.GpuContext;
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
      PinnedChunks chunks, RocksChunkStore store) {}

  private final GpuContext context;
  private final HostCacheView cache;
  private final WorkerStores stores;
  /** By key, least recently prepared first. */
  private final LinkedHashMap<String, Prepared> byKey = new LinkedHashMap<>();

  PreparedImages(GpuContext context, HostCacheView cache, WorkerStores stores) {
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
    if (known != null && Arrays.equals(known.manifest(), manifest)) {
      PinnedChunks chunks = chunks(placement);
      long t = WorkerMain.phase(phases, "placement", start);
      made = new Prepared(p.key(), p.name(), manifest, known.restore(), placement, chunks, known.store());
      HostPlacements.resolveAhead(chunks, known.restore().plan().manifest());
      WorkerMain.phase(phases, "resolve", t);
    } else {
      if (known != null) {
        known.restore().close();
      }
      made = prepareNew(p, manifest, placement, phases, start);
      // The garbage of parsing goes now, while idle, not in the middle of the cold start that follows.
      System.gc();
    }
    byKey.put(p.key(), made);
    List<String> dropped = new ArrayList<>();
    while (byKey.size() > Math.max(1, p.keep())) {
      String eldest = byKey.keySet().iterator().next();
      byKey.remove(eldest).restore().close();
      dropped.add(eldest);
    }
    phases.put("total", (System.nanoTime() - start) / 1e6);
    return new PrepareAnswer(phases, dropped);
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
        p.restore().close();
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
    byKey.values().forEach(p -> p.restore().close());
    byKey.clear();
  }
}
