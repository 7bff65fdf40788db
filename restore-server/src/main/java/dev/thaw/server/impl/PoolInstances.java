package dev.thaw.server.impl;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PoolExhaustedException;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.pool.WorkerOutOfMemoryException;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.cache.HostCacheFullException;
import dev.thaw.pool.cache.HostCacheOptions;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.cache.RestoreOrder;
import dev.thaw.image.store.Digest;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmTier;
import dev.thaw.pool.hbm.HbmTierOptions;
import java.util.HashMap;
import java.util.concurrent.TimeUnit;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.server.ServeException;
import dev.thaw.server.StartupTimeline;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.StartPhases;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One instance per worker process of the {@link ContextPool}: a cold start acquires a warm worker (its JVM,
 * driver and context already paid for) and tells it to become the image; requests travel to it over its pipe;
 * eviction releases it (the process exits, its device memory with it). Instances live in address spaces of their
 * own, so any images can be resident together, and a device fault kills one worker, never the server.
 *
 * <p><b>Host cache.</b> With a {@link HostImageCache} (every worker maps and registers it at start), a function's
 * image is staged into it when the function is registered ({@link #prepare}, on a thread of its own), so the first
 * cold start finds it there: each BECOME gets a {@link CacheLease} ({@link ImageSource#hostCache}) that pins the
 * image's chunks until the worker reports them all on the device, or dies. An image the cache cannot hold (or not
 * staged yet, or evicted since) is read from the store; {@link #imageState} says which, and why.
 *
 * <p><b>HBM tier.</b> With a host cache and an HBM tier budget, workers create an image's read-only slabs
 * exportable; when an instance is closed (scaled in, evicted) with its image wholly on the device, its worker
 * exports them and the device's {@link HbmTier} takes the descriptors before the worker exits, so the weights stay
 * on the GPU. The next worker for that image imports and maps them read-only instead of copying them (tier
 * {@code hbm}). When a start runs out of device memory, the tier gives its memory back and the start is tried once
 * more before the request is refused. {@link #residentBytes} tells the server's placement which device's tier holds
 * an image, so its next instance goes back there.
 *
 * <p><b>Timeline.</b> An instance's {@link FunctionInstance#restoreTimeline} is its worker's (TRACE, asked once the
 * restore is resident): the BECOME's phases and the restore's copies, on this process's clock.
 */
public final class PoolInstances implements InstanceFactory {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Logger LOG = LoggerFactory.getLogger("dev.thaw.server.instances");

  private final ContextPool pool;
  private final ChunkStore store;
  private final Path storePath;
  private final List<DeviceInfo> devices;
  private final Duration acquireWait;
  private final long retryAfterSeconds;
  private final HostImageCache cache;
  private final ExecutorService stager;
  /** Per image tag: where it stands in the host cache. */
  private final Map<String, Staging> staging = new ConcurrentHashMap<>();
  /** Per image tag: the image idle workers prepare, with the manifest object it was made from. */
  private final Map<String, Ready> prepared = new ConcurrentHashMap<>();
  /** Per device ordinal: the weights evicted instances left on it; empty without the tier. */
  private final Map<Integer, HbmTier> hbm = new HashMap<>();
  private volatile StartupTimeline timeline;
  /**
   * What a cold start's request need not wait for, on a thread made with the factory (not by the first cold start):
   * the start's log line (formatting it and writing it to the log's stream took 0.3-3 ms between the worker's answer
   * and the request's invoke) and asking the worker for the restore's timeline (on the way from the invoke's answer
   * to the response, the first time).
   */
  private final ThreadPoolExecutor background = new ThreadPoolExecutor(1, 1, 0, TimeUnit.MILLISECONDS,
      new LinkedBlockingQueue<>(), r -> {
        Thread t = new Thread(r, "thaw-pool-instances");
        t.setDaemon(true);
        return t;
      });

  /** A registered image as the pool's workers prepare it; {@code manifest} is the registration's, by identity. */
  private record Ready(ImageManifest manifest, PreparedImage image) {}

  /** An image's state in the host cache: {@code staging}, {@code cached} or {@code store} (with the reason). */
  private record Staging(String state, String reason, long stagedBytes, double millis) {
    ObjectNode json() {
      ObjectNode o = JsonNodeFactory.instance.objectNode();
      o.put("hostCache", state);
      if (reason != null) {
        o.put("reason", reason);
      }
      if (state.equals("cached")) {
        o.put("stagedBytes", stagedBytes);
        o.put("stageMillis", millis);
      }
      return o;
    }
  }

  /**
   * A pool whose workers map a host image cache of {@code hostCacheBytes} (0: none, every image from the store),
   * with this factory around it. The cache is created first (its path goes into the pool's options), closed with
   * the factory.
   */
  public static PoolInstances create(ContextPoolOptions poolOptions, long hostCacheBytes, long hbmTierBytes,
      ChunkStore store, Path storePath, List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter) {
    HostImageCache cache = null;
    if (hostCacheBytes > 0) {
      try {
        cache = HostImageCache.create(new HostCacheOptions().capacityBytes(hostCacheBytes));
      } catch (IOException e) {
        throw new UncheckedIOException("cannot create the host image cache (" + hostCacheBytes + " bytes)", e);
      }
      poolOptions = new ContextPoolOptions(poolOptions).setHostCachePath(cache.path());
    }
    try {
      return new PoolInstances(ContextPool.create(poolOptions), cache, hbmTierBytes, store, storePath, devices,
          acquireWait, retryAfter);
    } catch (RuntimeException | Error e) {
      if (cache != null) {
        cache.close();
      }
      throw e;
    }
  }

  /**
   * @param pool the pool; closed with this factory
   * @param store the store the server reads manifests from
   * @param storePath the same store's folder, which workers open read-only
   * @param devices the devices the pool serves, with their memory (the server's placement budget)
   * @param acquireWait how long a cold start waits for a worker when none is idle
   */
  public PoolInstances(ContextPool pool, ChunkStore store, Path storePath, List<DeviceInfo> devices,
      Duration acquireWait, Duration retryAfter) {
    this(pool, null, 0, store, storePath, devices, acquireWait, retryAfter);
  }

  /**
   * @param cache the host image cache the pool's workers map ({@link ContextPoolOptions#setHostCachePath}), or
   *     null; closed with this factory
   */
  public PoolInstances(ContextPool pool, HostImageCache cache, ChunkStore store, Path storePath,
      List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter) {
    this(pool, cache, 0, store, storePath, devices, acquireWait, retryAfter);
  }

  /**
   * @param hbmTierBytes device bytes each device's HBM tier may hold (0: no tier); needs {@code cache}
   */
  public PoolInstances(ContextPool pool, HostImageCache cache, long hbmTierBytes, ChunkStore store, Path storePath,
      List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter) {
    if (cache != null && hbmTierBytes > 0) {
      devices.forEach(d -> hbm.put(d.ordinal(), new HbmTier(new HbmTierOptions().maxBytes(hbmTierBytes))));
    }
    this.pool = pool;
    this.cache = cache;
    background.prestartCoreThread();
    this.stager = cache == null ? null : Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "thaw-host-cache-prefetch");
      t.setDaemon(true);
      return t;
    });
    this.store = store;
    this.storePath = storePath;
    this.devices = List.copyOf(devices);
    this.acquireWait = acquireWait;
    this.retryAfterSeconds = Math.max(1, retryAfter.toSeconds());
  }

  /** Tells {@code timeline} of the first instance's start: its worker's start-up and its BECOME's phases. */
  public PoolInstances reportStartsTo(StartupTimeline timeline) {
    this.timeline = timeline;
    return this;
  }

  @Override
  public String name() {
    return "pool";
  }

  @Override
  public List<DeviceInfo> devices() {
    return devices;
  }

  @Override
  public boolean sharedAddressSpace() {
    return false;
  }

  @Override
  public boolean canStart() {
    return pool.stats().stream().anyMatch(s -> s.idle() > 0);
  }

  /**
   * Registration: stages the image into the host cache (when there is one) and then has the pool's idle workers
   * prepare it ({@link ContextPool#prepare}), so that a cold start only maps memory and starts copying.
   */
  @Override
  public void prepare(String tag, ImageManifest manifest) {
    if (cache == null) {
      prepareWorkers(tag, manifest, null);
      return;
    }
    Staging now = staging.get(tag);
    if (now != null && (now.state().equals("staging") || now.state().equals("cached") && cached(manifest))) {
      return;
    }
    staging.put(tag, new Staging("staging", null, 0, 0));
    try {
      stager.execute(() -> stage(tag, manifest));
    } catch (java.util.concurrent.RejectedExecutionException e) {
      staging.put(tag, new Staging("store", "the server is closing", 0, 0));
    }
  }

  /** Reads the image into the host cache (verifying every chunk) and lets it go: it stays until evicted. */
  private void stage(String tag, ImageManifest manifest) {
    ChunkPlacement placement = null;
    try (CacheLease lease = cache.stage(tag, manifest, store)) {
      staging.put(tag, new Staging("cached", null, lease.stagedBytes(), lease.stageMillis()));
      placement = lease.placement();
    } catch (HostCacheFullException e) {
      staging.put(tag, new Staging("store", "the host cache cannot hold it: " + e.getMessage(), 0, 0));
    } catch (RuntimeException e) {
      staging.put(tag, new Staging("store", "staging failed: " + e.getMessage(), 0, 0));
    }
    prepareWorkers(tag, manifest, placement);
  }

  /** Has the pool's workers prepare the image (cubins from {@code placement} in the host cache, or the store). */
  private void prepareWorkers(String tag, ImageManifest manifest, ChunkPlacement placement) {
    Optional<byte[]> bytes;
    try {
      bytes = store.manifest(tag);
    } catch (RuntimeException e) {
      System.err.println("thaw: " + tag + ": not prepared in the workers (" + e.getMessage() + ")");
      return;
    }
    if (bytes.isEmpty()) {
      return;
    }
    PreparedImage image = new PreparedImage(PreparedImage.keyOf(tag, bytes.get()), tag, bytes.get(), placement);
    prepared.put(tag, new Ready(manifest, image));
    pool.prepare(image);
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

  /** {@code thaw_pool_workers{device, state}}: the pool's idle, starting and in-use workers per device. */
  @Override
  public void bindMetrics(MeterRegistry registry) {
    for (DeviceInfo d : devices) {
      int ordinal = d.ordinal();
      for (String state : List.of("idle", "starting", "in_use")) {
        Gauge.builder("thaw.pool.workers", pool, p -> workers(p, ordinal, state))
            .tag("device", Integer.toString(ordinal)).tag("state", state).register(registry);
      }
    }
  }

  private static double workers(ContextPool pool, int device, String state) {
    for (dev.thaw.pool.PoolStats s : pool.stats()) {
      if (s.device() == device) {
        return switch (state) {
          case "idle" -> s.idle();
          case "starting" -> s.starting();
          default -> s.inUse();
        };
      }
    }
    return 0;
  }

  @Override
  public JsonNode imageState(String tag) {
    if (cache == null) {
      return null;
    }
    Staging s = staging.get(tag);
    if (s == null) {
      return null;
    }
    ObjectNode o = s.json();
    ObjectNode held = o.putObject("hbmBytes");
    hbm.forEach((device, tier) -> {
      Long bytes = tier.heldImages().get(tag);
      if (bytes != null) {
        held.put(String.valueOf(device), bytes);
      }
    });
    return o;
  }

  @Override
  public long residentBytes(String tag, int device) {
    HbmTier tier = hbm.get(device);
    return tier == null ? 0 : tier.bytes(tag);
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
    Staging s = staging.get(tag);
    if (s == null || !s.state().equals("cached")) {
      if (s == null) {
        prepare(tag, manifest);
      }
      return null;
    }
    CacheLease pinned = cache.lease(tag, manifest);
    if (pinned != null) {
      return pinned;
    }
    if (!cached(manifest)) {
      staging.put(tag, new Staging("store", "evicted from the host cache; staging it again", 0, 0));
      prepare(tag, manifest);
      return null;
    }
    try {
      return cache.stage(tag, manifest, store);
    } catch (HostCacheFullException | IllegalStateException e) {
      return null;
    }
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
    HbmTier tier = hbm.get(device);
    try {
      return start(tag, manifest, device, tier);
    } catch (ServeException e) {
      // Out of device memory: the HBM tier's weights go before any admission is refused.
      if (e.status() != 503 || !e.code().equals("no_capacity") || tier == null || tier.giveWay(Long.MAX_VALUE) == 0) {
        throw e;
      }
      return start(tag, manifest, device, tier);
    } catch (RuntimeException e) {
      // A start that failed with the tier's slabs in it is tried once more without them (from the host cache).
      if (tier == null || tier.drop(tag) == 0) {
        throw e;
      }
      System.err.println("thaw: " + tag + ": a start with its HBM-tier slabs failed (" + e.getMessage()
          + "); dropped them, starting from the host cache");
      return start(tag, manifest, device, tier);
    }
  }

  private FunctionInstance start(String tag, ImageManifest manifest, int device, HbmTier tier) {
    Ready ready = prepared.get(tag);
    // Prepared for this registration (the worker has it prepared, or gets it whole), or read from the store now.
    PreparedImage image = ready != null && ready.manifest() == manifest ? ready.image() : null;
    byte[] bytes = image != null ? image.manifest()
        : store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    long t = System.nanoTime();
    Worker worker;
    try {
      worker = pool.acquire(device, acquireWait);
    } catch (PoolExhaustedException e) {
      throw new ServeException(503, "no_worker", "no worker is free on device " + device + ": " + e.getMessage(),
          retryAfterSeconds);
    }
    double acquireMs = (System.nanoTime() - t) / 1e6;
    CacheLease lease = null;
    try {
      lease = lease(tag, manifest);
      ImageSource source = lease == null ? ImageSource.store(storePath) : ImageSource.hostCache(lease, storePath);
      if (lease != null && tier != null) {
        source = source.withResident(tier.slabs(tag).orElse(List.of()));
      }
      BecomeResult b = image != null ? worker.becomeBlocking(image, source) : worker.becomeBlocking(tag, bytes, source);
      StartupTimeline timeline = this.timeline;
      if (timeline != null) {
        Map<String, Double> phases = new LinkedHashMap<>();
        phases.put("prepare wait", b.prepareWaitMillis());
        phases.putAll(b.phases());
        timeline.instanceStarted(worker.start(), phases);
      }
      Map<String, Double> p = b.phases();
      // From the store the copy is "copy + verify"; from the host cache, "copy" (its bytes were verified on entry).
      double restoreMs = p.getOrDefault("copy + verify", p.getOrDefault("copy", 0.0))
          + p.getOrDefault("rebuild state", 0.0);
      // Everything else the BECOME took (parse, map, modules, the pipe both ways) is the map phase.
      double mapMs = Math.max(0, b.roundTripMillis() - restoreMs);
      String from = switch (b.source()) {
        case "hbm" -> "hbm";
        case "cache" -> "host-cache";
        default -> "store";
      };
      StartLine line = new StartLine(tag, worker.pid(), device, from + (image != null ? ", prepared" : ""), b);
      try {
        background.execute(line);
      } catch (java.util.concurrent.RejectedExecutionException closing) {
        line.run();
      }
      return new Instance(worker, new StartPhases(acquireMs, mapMs, restoreMs, b.bytes(), from), tag,
          lease == null ? null : tier, background);
    } catch (WorkerOutOfMemoryException e) {
      worker.release();
      closeLease(lease);
      throw new ServeException(503, "no_capacity", "image '" + tag + "' does not fit on device " + device + ": "
          + e.getMessage(), retryAfterSeconds);
    } catch (RuntimeException | Error e) {
      worker.release();
      closeLease(lease);
      throw e;
    }
  }

  /** A cold start's log line, written on the background thread: a record, not a lambda of this many captures. */
  private record StartLine(String tag, long pid, int device, String from, BecomeResult b) implements Runnable {
    @Override
    public void run() {
      LOG.info("{}: cold start on worker {} (device {}), {}: BECOME {} ms round trip ({} ms of it waiting for its "
          + "PREPARE); in the worker {}; its answer read {} ms after its total ({} ms of it in the worker)", tag, pid,
          device, from, String.format("%.2f", b.roundTripMillis()), String.format("%.2f", b.prepareWaitMillis()),
          phasesLine(b.phases()), String.format("%.2f", b.answerMillis()), String.format("%.2f", b.answerSendMillis()));
    }
  }

  private static String phasesLine(Map<String, Double> phases) {
    StringBuilder line = new StringBuilder();
    phases.forEach((k, v) -> line.append(line.length() == 0 ? "" : ", ").append(k).append(' ')
        .append(String.format(java.util.Locale.ROOT, "%.2f", v)));
    return line.toString();
  }

  /** A lease whose worker failed: the worker is gone or going, nothing reads the chunks for it any more. */
  private static void closeLease(CacheLease lease) {
    if (lease != null) {
      lease.close();
    }
  }

  @Override
  public void close() {
    try {
      pool.close();
    } finally {
      background.shutdown();
      try {
        background.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      hbm.values().forEach(HbmTier::close);
      if (cache != null) {
        closeCache();
      }
    }
  }

  /**
   * Unmaps the cache once no prefetch writes into it: a stage in flight (its chunks are being read into the
   * arena) finishes first. One that outlasts the wait leaves the arena mapped until the process exits.
   */
  private void closeCache() {
    stager.shutdownNow();
    try {
      if (!stager.awaitTermination(60, TimeUnit.SECONDS)) {
        System.err.println("thaw: a host cache prefetch is still running; the cache stays mapped until exit");
        return;
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return;
    }
    cache.close();
  }

  private static final class Instance implements FunctionInstance {
    private final Worker worker;
    private final StartPhases phases;
    private final String image;
    private final HbmTier tier;
    private final ExecutorService background;
    private volatile boolean healthy = true;

    /**
     * @param tier where the worker's read-only slabs go when it is closed, or null
     * @param background where the restore's timeline is asked for
     */
    Instance(Worker worker, StartPhases phases, String image, HbmTier tier, ExecutorService background) {
      this.worker = worker;
      this.phases = phases;
      this.image = image;
      this.tier = tier;
      this.background = background;
    }

    @Override
    public StartPhases startPhases() {
      return phases;
    }

    @Override
    public int device() {
      return worker.device();
    }

    @Override
    public FunctionResponse invokeBlocking(FunctionRequest request) throws Exception {
      try {
        return invoke(request).get().response();
      } catch (java.util.concurrent.ExecutionException e) {
        throw e.getCause() instanceof Exception x ? x : e;
      }
    }

    /** Writes the request to the worker's pipe (a large one from the pool's I/O thread) and returns. */
    @Override
    public boolean invokesAsync() {
      return true;
    }

    /** The worker's answer completes it on the pool's reader thread; the caller's thread only writes the frame. */
    @Override
    public CompletableFuture<Invoked> invoke(FunctionRequest request) {
      byte[] json;
      try {
        json = JSON.writeValueAsBytes(request.json());
      } catch (JsonProcessingException e) {
        return CompletableFuture.failedFuture(new InvalidRequestException("the request cannot be written as JSON: "
            + e.getOriginalMessage()));
      }
      CompletableFuture<InvokeResult> sent;
      try {
        sent = worker.invoke(json, request.binary().orElse(null), null);
      } catch (RuntimeException e) {
        return CompletableFuture.failedFuture(failure(e));
      }
      CompletableFuture<Invoked> served = new CompletableFuture<>();
      sent.whenComplete((r, e) -> {
        if (e != null) {
          served.completeExceptionally(failure(e instanceof CompletionException && e.getCause() != null
              ? e.getCause() : e));
          return;
        }
        try {
          ByteBuffer binary = r.binary();
          FunctionResponse response = new FunctionResponse(r.jsonTree(),
              binary == null || !binary.hasRemaining() ? Optional.empty() : Optional.of(binary));
          served.complete(new Invoked(response, r.phases().getOrDefault("invoke", r.roundTripMillis())));
        } catch (RuntimeException x) {
          served.completeExceptionally(x);
        }
      });
      return served;
    }

    /** What a failed invoke is to the server: a refused request (400), or a worker lost with it. */
    private Throwable failure(Throwable e) {
      if (e instanceof WorkerException w) {
        if (w.kind() == WorkerErrorKind.INVALID_REQUEST) {
          return new InvalidRequestException(w.detail());
        }
        if (w.workerLost() || !worker.isAlive()) {
          healthy = false;
        }
      }
      return e;
    }

    /**
     * The worker's timeline, asked for once its restore is resident (on the factory's background thread: not on the
     * way from the first invoke's answer to its response); null when the worker ends first.
     */
    @Override
    public java.util.concurrent.CompletableFuture<RestoreTimeline> restoreTimeline() {
      return worker.resident().thenComposeAsync(r -> worker.restoreTimeline(ColdStartTraces.MAX_SPANS), background)
          .thenApply(t -> new RestoreTimeline(t.chromeTrace(), t.originNanos()))
          .exceptionally(e -> null);
    }

    @Override
    public boolean healthy() {
      return healthy && worker.isAlive();
    }

    @Override
    public String describe() {
      return "worker pid " + worker.pid() + " on device " + worker.device();
    }

    /** Releases the worker (it exits), first handing its read-only slabs to the HBM tier where there is one. */
    @Override
    public void close() {
      try {
        handToTier();
      } finally {
        worker.release();
      }
    }

    private void handToTier() {
      java.util.concurrent.CompletableFuture<?> resident = worker.resident();
      if (tier == null || !healthy || !worker.isAlive() || !resident.isDone() || resident.isCompletedExceptionally()) {
        return;
      }
      if (tier.slabs(image).isPresent()) {
        // The tier holds this image's weights already (this worker mapped them from it; imported memory cannot be
        // exported again): they stay on the device as they are.
        return;
      }
      try {
        List<ExportedSlab> slabs = worker.exportReadOnly().get(10, TimeUnit.SECONDS);
        if (!slabs.isEmpty()) {
          tier.offer(image, worker.pid(), slabs);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } catch (Exception e) {
        // The weights are not kept on the device; the next start copies them from the host cache.
        System.err.println("thaw: " + image + ": read-only slabs not kept in the HBM tier: " + e);
      }
    }
  }
}
