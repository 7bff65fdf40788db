package dev.thaw.pool.tiers;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.PlacementCosts;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.Worker;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.cache.HostCacheFullException;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmTier;
import dev.thaw.pool.hbm.HbmTierOptions;
import dev.thaw.runtime.host.Threads;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiPredicate;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where a node keeps its registered images between cold starts, and which it keeps: the policy over the pool's
 * tiers, fastest first, with one rule that never bends — a cold start that misses a tier falls back to the next
 * (HBM tier → host cache → store) and never fails for it.
 *
 * <ul>
 *   <li><b>HBM tier</b> (per device, {@link HbmTier}): when an instance scales to zero with its image wholly on the
 *       device, its read-only slabs stay there ({@link #keepOnDevice}), least recently used dropped beyond the
 *       budget, and all of them given back before an admission is refused for want of memory ({@link #giveWay}).
 *   <li><b>Host cache</b> ({@link HostImageCache}): a registration stages its image only into free space
 *       ({@link Staging#IF_FREE}: it never pushes out what cold starts used); a cold start that finds its image
 *       missing reads it from the store and stages it behind the start, evicting the least recently used extents.
 *   <li><b>Prepared ahead</b> ({@link ContextPool#prepare}): blank workers hold the most recently cold-started
 *       images prepared; a registration joins while there is room.
 * </ul>
 *
 * {@link Staging#ALWAYS} is the policy-free baseline the many-function benchmark compares with: every registration
 * stages its image, evicting whatever is least recently used. Thread-safe.
 */
public final class ImageTiers implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(ImageTiers.class);

  /** When a registration stages its image into the host cache. */
  public enum Staging {
    /** Only into free space: a registration never evicts. */
    IF_FREE,
    /** Always, evicting the least recently used: the policy-free baseline. */
    ALWAYS
  }

  /**
   * An image's place in the tiers.
   *
   * @param hostCache {@code staging}, {@code cached} or {@code store} (then {@code reason} says why)
   * @param hbmBytes bytes of its read-only slabs each device's HBM tier holds
   */
  public record TierState(String hostCache, String reason, long stagedBytes, double stageMillis,
      Map<Integer, Long> hbmBytes) {}

  /**
   * What a cold start restores from: {@code source} (its lease, if any, goes to the worker), the image prepared
   * ahead (null when the registration's manifest is not the one given), and the manifest as stored.
   */
  public record ColdSource(ImageSource source, PreparedImage prepared, byte[] manifest, String tier) {
    /** The lease goes back when the start failed before a worker took it. */
    public void abandon() {
      if (source.lease() != null) {
        source.lease().close();
      }
    }
  }

  /**
   * Cold starts by the way they began (this device's HBM tier, another device's, the host cache through several links
   * or one, the store), and what the tiers moved.
   */
  public record Stats(long hbmStarts, long hbmPeerStarts, long multiLinkStarts, long hostCacheStarts,
      long storeStarts, long hbmKept, long stagedOnUse, long registrationStagesSkipped) {}

  /** A registered image as the pool's workers prepare it; {@code manifest} is the registration's, by identity. */
  private record Registered(ImageManifest manifest, PreparedImage image) {}

  /** @param retry a cold start that finds it so stages it (it was skipped at registration, or evicted) */
  private record Placed(String state, String reason, long stagedBytes, double millis, boolean retry) {
    Placed(String state, String reason, long stagedBytes, double millis) {
      this(state, reason, stagedBytes, millis, false);
    }
  }

  private final ContextPool pool;
  private final HostImageCache cache;
  private final ChunkStore store;
  private final Path storePath;
  private final Staging staging;
  private final ExecutorService stager;
  /**
   * Held while a registration's outcome is recorded and while one is unregistered, so that a stage or a group's offer
   * that finishes after its image was unregistered records nothing.
   */
  private final Object registration = new Object();
  private final Map<String, Placed> placed = new ConcurrentHashMap<>();
  private final Map<String, Registered> registered = new ConcurrentHashMap<>();
  /**
   * The ranks' tags of the groups registered, by group tag; a rank's image is staged like any other, never prepared
   * alone (its workers prepare the group whole), and its placement once staged is kept in {@link #rankPlacements}.
   */
  private final Map<String, List<String>> groups = new ConcurrentHashMap<>();
  private final Set<String> ranks = ConcurrentHashMap.newKeySet();
  private final Map<String, Optional<ChunkPlacement>> rankPlacements = new ConcurrentHashMap<>();
  private final Map<Integer, HbmTier> hbm = new HashMap<>();
  private volatile ColdStartPlacement placement = new ColdStartPlacement(new PlacementCosts(), (a, b) -> false);
  private final AtomicLong hbmStarts = new AtomicLong();
  private final AtomicLong hbmPeerStarts = new AtomicLong();
  private final AtomicLong multiLinkStarts = new AtomicLong();
  private final AtomicLong cacheStarts = new AtomicLong();
  private final AtomicLong storeStarts = new AtomicLong();
  private final AtomicLong hbmKept = new AtomicLong();
  private final AtomicLong stagedOnUse = new AtomicLong();
  private final AtomicLong stagesSkipped = new AtomicLong();

  /**
   * @param cache the host cache the pool's workers map, or null (every image from the store); closed with this
   * @param hbmTierBytes device bytes each device's HBM tier may hold (0: none); needs {@code cache}
   * @param storePath the store's folder, which workers open read-only
   */
  public ImageTiers(ContextPool pool, HostImageCache cache, long hbmTierBytes, ChunkStore store, Path storePath,
      List<Integer> devices, Staging staging) {
    this.pool = pool;
    this.cache = cache;
    this.store = store;
    this.storePath = storePath;
    this.staging = staging;
    if (cache != null && hbmTierBytes > 0) {
      devices.forEach(d -> hbm.put(d, new HbmTier(new HbmTierOptions().setMaxBytes(hbmTierBytes))));
    }
    this.stager = cache == null ? null
        : Executors.newSingleThreadExecutor(Threads.daemonFactory("thaw-host-cache-stage"));
  }

  /** The host cache, or null. */
  public HostImageCache cache() {
    return cache;
  }

  /**
   * Prices cold starts with {@code costs} over devices that reach each other's memory where {@code peers} says (the
   * driver's {@code canAccessPeer}): then a start may restore through idle devices' links and from another device's
   * HBM tier. Until this is called no two devices are taken for peers (each start uses its own device's tiers only).
   */
  public ImageTiers placeWith(PlacementCosts costs, BiPredicate<Integer, Integer> peers) {
    // A node's topology does not change while it serves: each pair is asked once (placement runs under the server's
    // lock).
    Map<List<Integer>, Boolean> known = new ConcurrentHashMap<>();
    this.placement = new ColdStartPlacement(costs, (a, b) -> known.computeIfAbsent(List.of(a, b),
        pair -> peers.test(a, b)));
    return this;
  }

  /** What cold starts are priced with. */
  public PlacementCosts costs() {
    return placement.costs();
  }

  /**
   * Where a cold start of {@code tag} ({@code imageBytes} of device memory) is cheapest now and by which way in, over
   * {@code devices} as the server sees them (fits, free budget, busy), with what each device's HBM tier holds of the
   * image and whether the host cache holds all of it filled in here; empty when it fits no device.
   */
  public Optional<ColdStartPlacement.Choice> place(String tag, long imageBytes,
      List<ColdStartPlacement.DeviceView> devices) {
    List<ColdStartPlacement.DeviceView> views = new ArrayList<>(devices.size());
    for (ColdStartPlacement.DeviceView d : devices) {
      views.add(new ColdStartPlacement.DeviceView(d.ordinal(), d.fits(), d.freeBytes(), d.busy(),
          residentBytes(tag, d.ordinal()), d.vacant()));
    }
    Placed p = placed.get(tag);
    boolean hostCached = cache != null && p != null && p.state().equals("cached");
    return placement.place(imageBytes, hostCached, views);
  }

  /**
   * Registration: stages the image into the host cache (as the staging policy allows, on a thread of its own) and
   * offers it to the pool's prepare-ahead, so that a cold start only maps memory and starts copying.
   */
  public void register(String tag, ImageManifest manifest) {
    // A registration reads the manifest again: an equal one keeps what was prepared for it (a cold start finds it by
    // reference).
    registered.computeIfPresent(tag, (t, r) -> r.manifest() != manifest && r.manifest().equals(manifest)
        ? new Registered(manifest, r.image()) : r);
    if (cache == null) {
      prepareAhead(tag, manifest, null);
      return;
    }
    stage(tag, manifest, staging == Staging.ALWAYS);
  }

  /**
   * Registration of a group: each rank's image staged into the host cache as {@link #register} stages an image; then,
   * once every rank's is placed (behind them on the staging thread), the group is offered whole to the pool's
   * prepare-ahead ({@link PreparedImage#group}), each rank with its placement.
   */
  public void registerGroup(String tag, List<String> rankTags, List<ImageManifest> manifests) {
    groups.put(tag, List.copyOf(rankTags));
    ranks.addAll(rankTags);
    for (int r = 0; r < rankTags.size(); r++) {
      if (cache != null) {
        stage(rankTags.get(r), manifests.get(r), staging == Staging.ALWAYS);
      }
    }
    Runnable prepare = () -> prepareGroupAhead(tag, rankTags, manifests);
    if (stager == null) {
      prepare.run();
      return;
    }
    try {
      stager.execute(prepare);
    } catch (RejectedExecutionException e) {
      // Closing.
    }
  }

  private void prepareGroupAhead(String tag, List<String> rankTags, List<ImageManifest> manifests) {
    List<PreparedImage> images = new ArrayList<>();
    try {
      for (String rank : rankTags) {
        byte[] bytes = store.manifest(rank).orElseThrow(() -> new ImageNotFoundException(rank));
        images.add(new PreparedImage(PreparedImage.keyOf(rank, bytes), rank, bytes,
            rankPlacements.getOrDefault(rank, Optional.empty()).orElse(null)));
      }
    } catch (RuntimeException e) {
      LOG.warn("{}: not prepared in the workers ({})", tag, e.getMessage());
      return;
    }
    PreparedImage group = PreparedImage.group(tag, images);
    synchronized (registration) {
      if (!rankTags.equals(groups.get(tag))) {
        return;
      }
      // Each rank's stored manifest kept too: a cold start sends it without reading the store again.
      for (int r = 0; r < images.size(); r++) {
        registered.put(rankTags.get(r), new Registered(manifests.get(r), images.get(r)));
      }
      registered.put(tag, new Registered(manifests.get(0), group));
    }
    pool.prepare(group);
  }

  /** The group {@code tag} as the pool's workers prepare it, or null until it is offered (or once unregistered). */
  public PreparedImage preparedGroup(String tag) {
    Registered r = registered.get(tag);
    return r != null && r.image().isGroup() ? r.image() : null;
  }

  /** Stages on the staging thread unless the image is being staged or is cached as this manifest already. */
  private void stage(String tag, ImageManifest manifest, boolean mayEvict) {
    Placed now = placed.get(tag);
    if (now != null && (now.state().equals("staging") || now.state().equals("cached") && cached(manifest))) {
      return;
    }
    placed.put(tag, new Placed("staging", null, 0, 0));
    try {
      stager.execute(() -> stageNow(tag, manifest, mayEvict));
    } catch (RejectedExecutionException e) {
      placed.put(tag, new Placed("store", "the server is closing", 0, 0));
    }
  }

  private void stageNow(String tag, ImageManifest manifest, boolean mayEvict) {
    ChunkPlacement placement = null;
    Placed result;
    try (CacheLease lease = cache.stage(tag, manifest, store, mayEvict)) {
      result = new Placed("cached", null, lease.stagedBytes(), lease.stageMillis());
      placement = lease.placement();
    } catch (HostCacheFullException e) {
      boolean neverFits = e.needed() > e.capacity();
      if (!mayEvict && !neverFits) {
        stagesSkipped.incrementAndGet();
        result = new Placed("store", "not staged at registration: the host cache has no free room for it "
            + "(it is staged at its first cold start)", 0, 0, true);
      } else {
        result = new Placed("store", "the host cache cannot hold it: " + e.getMessage(), 0, 0);
      }
    } catch (RuntimeException e) {
      result = new Placed("store", "staging failed: " + e.getMessage(), 0, 0);
    }
    synchronized (registration) {
      // Unregistered while it staged (its "staging" state is gone): nothing of it is recorded, nothing prepared.
      if (placed.replace(tag, result) == null) {
        return;
      }
      if (ranks.contains(tag)) {
        rankPlacements.put(tag, Optional.ofNullable(placement));
        return;
      }
    }
    prepareAhead(tag, manifest, placement);
  }

  /** Offers the image to the pool's prepare-ahead (cubins from {@code placement} in the host cache, or the store). */
  private void prepareAhead(String tag, ImageManifest manifest, ChunkPlacement placement) {
    Optional<byte[]> bytes;
    try {
      bytes = store.manifest(tag);
    } catch (RuntimeException e) {
      LOG.warn("{}: not prepared in the workers ({})", tag, e.getMessage());
      return;
    }
    if (bytes.isEmpty()) {
      return;
    }
    PreparedImage image = new PreparedImage(PreparedImage.keyOf(tag, bytes.get()), tag, bytes.get(), placement);
    registered.put(tag, new Registered(manifest, image));
    pool.prepare(image);
  }

  /** The image is no longer registered: workers drop it, the HBM tiers let its slabs go. */
  public void unregister(String tag) {
    synchronized (registration) {
      List<String> rankTags = groups.remove(tag);
      if (rankTags != null) {
        rankTags.forEach(r -> {
          ranks.remove(r);
          rankPlacements.remove(r);
          unregister(r);
        });
      }
      registered.remove(tag);
      placed.remove(tag);
    }
    pool.forget(tag);
    hbm.values().forEach(t -> t.drop(tag));
  }

  /**
   * What a cold start of {@code tag} on {@code device} restores from, through the device's own link: the HBM tier's
   * slabs and the host cache's lease where they hold the image, else the store. Marks it used.
   */
  public ColdSource coldStart(String tag, ImageManifest manifest, int device) {
    return coldStart(tag, manifest, new ColdStartPlacement.Choice(device, ColdStartPlacement.Source.HOST_CACHE, -1,
        0));
  }

  /**
   * What a cold start of {@code tag} placed by {@link #place} restores from: the host cache's lease where it holds
   * the image, with the target device's HBM-tier slabs, or (the choice's {@code hbm-peer}) the other device's, and
   * the helpers' links the choice lends it; else the store (and the image is staged behind the start). A way the
   * choice named that is gone meanwhile (the other tier dropped the image) falls back to the next. Marks it used.
   */
  public ColdSource coldStart(String tag, ImageManifest manifest, ColdStartPlacement.Choice choice) {
    pool.used(tag);
    Registered r = registered.get(tag);
    PreparedImage image = r != null && r.manifest() == manifest ? r.image() : null;
    byte[] bytes = image != null ? image.manifest()
        : store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    CacheLease lease = lease(tag, manifest);
    if (lease == null) {
      storeStarts.incrementAndGet();
      return new ColdSource(ImageSource.store(storePath), image, bytes, "store");
    }
    ImageSource source = ImageSource.hostCache(lease, storePath);
    HbmTier tier = hbm.get(choice.device());
    List<ExportedSlab> slabs = tier == null ? null : tier.slabs(tag).orElse(List.of());
    if (slabs != null) {
      source = source.withResident(slabs);
    }
    String way = slabs != null && !slabs.isEmpty() ? "hbm" : "host-cache";
    if (way.equals("host-cache") && choice.source() == ColdStartPlacement.Source.HBM_PEER) {
      HbmTier other = hbm.get(choice.tierDevice());
      List<ExportedSlab> theirs = other == null ? List.of() : other.slabs(tag).orElse(List.of());
      if (!theirs.isEmpty()) {
        source = source.withPeer(choice.tierDevice(), theirs);
        way = "hbm-peer";
      }
    }
    if (!choice.helpers().isEmpty()) {
      // The rest of the image (all of it, from the host cache alone) comes through the idle devices' links as well.
      source = source.withHelpers(choice.helpers(), choice.helperShare());
      way = way.equals("host-cache") ? "host-cache-multilink" : way;
    }
    (switch (way) {
      case "hbm" -> hbmStarts;
      case "hbm-peer" -> hbmPeerStarts;
      case "host-cache-multilink" -> multiLinkStarts;
      default -> cacheStarts;
    }).incrementAndGet();
    return new ColdSource(source, image, bytes, way);
  }

  /**
   * The host cache's lease on the image when all of it is there (staging its last chunks would read the store on
   * the cold path: then the worker reads the store itself, on demand, and the image is staged again behind it);
   * else null.
   */
  private CacheLease lease(String tag, ImageManifest manifest) {
    if (cache == null) {
      return null;
    }
    Placed s = placed.get(tag);
    if (s == null || !s.state().equals("cached")) {
      if (s == null || s.retry()) {
        stagedOnUse.incrementAndGet();
        stage(tag, manifest, true);
      }
      return null;
    }
    CacheLease pinned = cache.lease(tag, manifest);
    if (pinned != null) {
      return pinned;
    }
    if (!cached(manifest)) {
      placed.put(tag, new Placed("store", "evicted from the host cache; staging it again", 0, 0, true));
      stagedOnUse.incrementAndGet();
      stage(tag, manifest, true);
      return null;
    }
    try {
      return cache.stage(tag, manifest, store);
    } catch (HostCacheFullException | IllegalStateException e) {
      return null;
    }
  }

  /** True if every chunk of the image is in the host cache now (a hash probe each). */
  private boolean cached(ImageManifest manifest) {
    for (Digest d : RestoreOrder.chunks(manifest)) {
      if (!cache.contains(d)) {
        return false;
      }
    }
    return true;
  }

  /** True when {@code device} keeps an HBM tier: a start there may map slabs, and a scaled-in one may leave them. */
  public boolean hasHbmTier(int device) {
    return hbm.containsKey(device);
  }

  /**
   * Hands a scaled-in worker's read-only slabs to its device's HBM tier before it exits or is recycled (where the
   * tier holds none of the image yet: imported memory cannot be exported again). The weights then stay on the GPU
   * for the next start. Best effort: the next start copies them from the host cache otherwise.
   */
  public void keepOnDevice(String tag, Worker worker) {
    HbmTier tier = hbm.get(worker.device());
    if (tier == null || tier.slabs(tag).isPresent()) {
      return;
    }
    try {
      List<ExportedSlab> slabs = worker.exportReadOnly().get(10, TimeUnit.SECONDS);
      if (!slabs.isEmpty() && tier.offer(tag, worker.pid(), slabs)) {
        hbmKept.incrementAndGet();
        // The tier holds that memory now: a worker that drops the image to be recycled must not scrub it.
        worker.exportKept();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      LOG.info("{}: read-only slabs not kept in the HBM tier: {}", tag, e.toString());
    }
  }

  /** Gives back every byte of {@code device}'s HBM tier; returns how many (0: nothing to give). */
  public long giveWay(int device) {
    HbmTier tier = hbm.get(device);
    return tier == null ? 0 : tier.giveWay(Long.MAX_VALUE);
  }

  /** Drops the image's slabs from {@code device}'s HBM tier (a start with them failed); returns the bytes. */
  public long dropFromDevice(String tag, int device) {
    HbmTier tier = hbm.get(device);
    return tier == null ? 0 : tier.drop(tag);
  }

  /** Bytes of the image's read-only slabs the HBM tier of {@code device} holds (the placement's hint). */
  public long residentBytes(String tag, int device) {
    HbmTier tier = hbm.get(device);
    return tier == null ? 0 : tier.bytes(tag);
  }

  /** Bytes every device's HBM tier holds. */
  public long hbmBytes() {
    return hbm.values().stream().mapToLong(HbmTier::bytes).sum();
  }

  /** The image's place in the tiers, or null without a host cache or before it was registered. */
  public TierState state(String tag) {
    if (cache == null) {
      return null;
    }
    Placed s = placed.get(tag);
    if (s == null) {
      return null;
    }
    Map<Integer, Long> held = new LinkedHashMap<>();
    hbm.forEach((device, tier) -> {
      long bytes = tier.bytes(tag);
      if (bytes > 0) {
        held.put(device, bytes);
      }
    });
    return new TierState(s.state(), s.reason(), s.stagedBytes(), s.millis(), held);
  }

  public Stats stats() {
    return new Stats(hbmStarts.get(), hbmPeerStarts.get(), multiLinkStarts.get(), cacheStarts.get(),
        storeStarts.get(), hbmKept.get(), stagedOnUse.get(), stagesSkipped.get());
  }

  /**
   * Lets the HBM tiers' descriptors go and unmaps the cache once no stage writes into it (one in flight finishes
   * first; one that outlasts the wait leaves the arena mapped until the process exits).
   */
  @Override
  public void close() {
    hbm.values().forEach(HbmTier::close);
    if (cache == null) {
      return;
    }
    stager.shutdownNow();
    try {
      if (!stager.awaitTermination(60, TimeUnit.SECONDS)) {
        LOG.warn("A host cache stage is still running; the cache stays mapped until exit");
        return;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    cache.close();
  }
}
