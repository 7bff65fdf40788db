package dev.thaw.server.impl;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PlacementCosts;
import dev.thaw.pool.PoolExhaustedException;
import dev.thaw.pool.PoolStats;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.RankImage;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.pool.WorkerLostException;
import dev.thaw.pool.WorkerOutOfMemoryException;
import dev.thaw.pool.cache.HostImageCache;
import dev.thaw.pool.tiers.ImageTiers;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.StartupTimeline;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.InstanceLostException;
import dev.thaw.server.spi.StartPhases;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.BiPredicate;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One instance per worker process of the {@link ContextPool}: a cold start acquires a warm worker (its JVM,
 * driver and context already paid for) and tells it to become the image; requests travel to it over its pipe;
 * eviction releases it (the process exits, its device memory with it). Instances live in address spaces of their
 * own, so any images can be resident together, and a device fault kills one worker, never the server.
 *
 * <p>Where each start goes and reads its image from, and what the node keeps between starts (HBM tier, host cache,
 * images prepared ahead), is the pool's {@link ImageTiers}: this class asks it at each registration ({@link #prepare}),
 * placement ({@link ImageTiers#place}: this device's HBM tier, another's by a peer copy, the host cache through this
 * device's link and idle devices' links, or its own alone, the store), cold start ({@link ImageTiers#coldStart}) and
 * scale-in ({@link ImageTiers#keepOnDevice}). When a start runs out
 * of device memory, the device's HBM tier gives its memory back and the start is tried once more before the
 * request is refused; a start that failed with the tier's slabs in it is tried once more without them.
 *
 * <p><b>Timeline.</b> An instance's {@link FunctionInstance#restoreTimeline} is its worker's (TRACE, asked once the
 * restore is resident): the BECOME's phases and the restore's copies, on this process's clock.
 */
public final class PoolInstances implements InstanceFactory {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Logger LOG = LoggerFactory.getLogger(ServerLogs.INSTANCES);

  private final ContextPool pool;
  private final ImageTiers tiers;
  private final List<DeviceInfo> devices;
  private final Duration acquireWait;
  /** The groups functions serve: each group's tag and its ranks' tags, which the tiers know as images. */
  private final Map<String, List<String>> groups = new ConcurrentHashMap<>();
  private final long retryAfterSeconds;
  private volatile StartupTimeline timeline;
  /**
   * What a cold start's request need not wait for, on a thread made with the factory (not by the first cold start):
   * the start's log line and asking the worker for the restore's timeline.
   */
  private final ThreadPoolExecutor background = new ThreadPoolExecutor(1, 1, 0, TimeUnit.MILLISECONDS,
      new LinkedBlockingQueue<>(), Threads.daemonFactory("thaw-pool-instances"));

  /**
   * @param pool the pool; closed with this factory
   * @param store the store the server reads manifests from
   * @param storePath the same store's folder, which workers open read-only
   * @param devices the devices the pool serves, with their memory (the server's placement budget)
   * @param acquireWait how long a cold start waits for a worker when none is idle
   */
  public PoolInstances(ContextPool pool, ChunkStore store, Path storePath, List<DeviceInfo> devices,
      Duration acquireWait, Duration retryAfter) {
    this(pool, null, 0, store, storePath, devices, acquireWait, retryAfter, ImageTiers.Staging.IF_FREE);
  }

  /**
   * @param cache the host image cache the pool's workers map ({@link ContextPoolOptions#setHostCachePath}), or
   *     null; closed with this factory
   */
  public PoolInstances(ContextPool pool, HostImageCache cache, ChunkStore store, Path storePath,
      List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter) {
    this(pool, cache, 0, store, storePath, devices, acquireWait, retryAfter, ImageTiers.Staging.IF_FREE);
  }

  /** @param hbmTierBytes device bytes each device's HBM tier may hold (0: no tier); needs {@code cache} */
  public PoolInstances(ContextPool pool, HostImageCache cache, long hbmTierBytes, ChunkStore store, Path storePath,
      List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter) {
    this(pool, cache, hbmTierBytes, store, storePath, devices, acquireWait, retryAfter, ImageTiers.Staging.IF_FREE);
  }

  /** @param staging when a registration stages its image into the host cache */
  public PoolInstances(ContextPool pool, HostImageCache cache, long hbmTierBytes, ChunkStore store, Path storePath,
      List<DeviceInfo> devices, Duration acquireWait, Duration retryAfter, ImageTiers.Staging staging) {
    this.pool = pool;
    this.tiers = new ImageTiers(pool, cache, hbmTierBytes, store, storePath,
        devices.stream().map(DeviceInfo::ordinal).toList(), staging);
    background.prestartCoreThread();
    this.devices = List.copyOf(devices);
    this.acquireWait = acquireWait;
    this.retryAfterSeconds = Math.max(1, retryAfter.toSeconds());
  }

  /** Tells {@code timeline} of the first instance's start: its worker's start-up and its BECOME's phases. */
  public PoolInstances reportStartsTo(StartupTimeline timeline) {
    this.timeline = timeline;
    return this;
  }

  /**
   * Prices cold starts with {@code costs} over devices that reach each other's memory where {@code peers} says (the
   * driver's {@code canAccessPeer}): a start may then restore through idle devices' links as well as its own and from
   * another device's HBM tier ({@link ImageTiers#placeWith}). Without it each start uses its own device alone.
   */
  public PoolInstances placeWith(PlacementCosts costs, BiPredicate<Integer, Integer> peers) {
    tiers.placeWith(costs, peers);
    return this;
  }

  /** The node's tiers: what each cold start began from, for metrics and benchmarks. */
  public ImageTiers tiers() {
    return tiers;
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
  public int maxInstances(int device) {
    ContextPoolOptions o = pool.options();
    return Math.max(1, o.maxWorkers() - o.idleTarget());
  }

  @Override
  public boolean canStart() {
    return pool.stats().stream().anyMatch(s -> s.idle() > 0);
  }

  @Override
  public void prepare(String tag, ImageManifest manifest) {
    tiers.register(tag, manifest);
  }

  @Override
  public boolean servesGroups() {
    return true;
  }

  /**
   * Each rank's image staged into the host cache as an image's is, then the group prepared whole in the idle workers
   * ({@link ImageTiers#registerGroup}).
   */
  @Override
  public void prepareGroup(String tag, GroupImage.Stored group) {
    groups.put(tag, group.group().rankTags());
    tiers.registerGroup(tag, group.group().rankTags(), group.ranks());
  }

  @Override
  public void unprepare(String tag) {
    groups.remove(tag);
    tiers.unregister(tag);
  }

  /**
   * {@code thaw_pool_workers{device, state}}: the pool's idle, starting and in-use workers per device; {@code
   * thaw_pool_prepares_pending{device}}: PREPAREs its idle workers have not answered; {@code
   * thaw_pool_recycles_total{device}}: workers that dropped their image and went back blank.
   */
  @Override
  public void bindMetrics(MeterRegistry registry) {
    for (DeviceInfo d : devices) {
      int ordinal = d.ordinal();
      for (String state : List.of("idle", "starting", "in_use")) {
        Gauge.builder("thaw.pool.workers", pool, p -> workers(p, ordinal, state))
            .tag("device", Integer.toString(ordinal)).tag("state", state)
            .description("the context pool's worker processes per device: idle (warm, ready for a cold start), "
                + "starting, in use by an instance").register(registry);
      }
      Gauge.builder("thaw.pool.prepares.pending", pool, p -> preparing(p, ordinal))
          .tag("device", Integer.toString(ordinal))
          .description("PREPAREs sent to the device's idle workers and not yet answered (images and groups made "
              + "ready ahead of their cold starts): a cold start now may wait for one").register(registry);
      FunctionCounter.builder("thaw.pool.recycles", pool, p -> recycles(p, ordinal))
          .tag("device", Integer.toString(ordinal))
          .description("workers that scaled to zero, dropped their image (scrubbed) and went back to the idle set "
              + "blank, instead of exiting").register(registry);
    }
    bindTierMetrics(registry);
  }

  /**
   * The node's tiers ({@link ImageTiers}): cold starts by the tier they began from, the host cache's bytes (used,
   * pinned, staged, evicted), the HBM tiers' bytes, and what the policy staged at cold starts or skipped at
   * registration. No per-image series: a node has hundreds of images.
   */
  private void bindTierMetrics(MeterRegistry registry) {
    for (String tier : List.of("hbm", "hbm-peer", "host-cache-multilink", "host-cache", "store")) {
      FunctionCounter.builder("thaw.cold.starts", tiers, t -> coldStarts(t.stats(), tier)).tag("tier", tier)
          .description("cold starts of pool-backed instances by the tier their image began from").register(registry);
    }
    FunctionCounter.builder("thaw.tier.stages", tiers, t -> t.stats().stagedOnUse()).tag("when", "cold_start")
        .description("images staged into the host cache at a cold start that missed it, and registrations "
            + "not staged for want of free room").register(registry);
    FunctionCounter.builder("thaw.tier.stages", tiers, t -> t.stats().registrationStagesSkipped())
        .tag("when", "registration_skipped").register(registry);
    FunctionCounter.builder("thaw.hbm.kept", tiers, t -> t.stats().hbmKept())
        .description("scaled-in instances whose read-only weights stayed on the device").register(registry);
    Gauge.builder("thaw.hbm.tier", tiers, ImageTiers::hbmBytes).baseUnit("bytes")
        .description("device bytes the HBM tiers hold, all devices").register(registry);
    HostImageCache cache = tiers.cache();
    if (cache == null) {
      return;
    }
    for (String state : List.of("capacity", "used", "pinned")) {
      Gauge.builder("thaw.host.cache", cache, c -> hostCache(c.stats(), state)).tag("state", state)
          .baseUnit("bytes").description("the host image cache's bytes: its capacity, what it holds, what running "
              + "restores pin").register(registry);
    }
    FunctionCounter.builder("thaw.host.cache.staged", cache, c -> c.stats().stagedBytes()).baseUnit("bytes")
        .description("bytes read from the store into the host cache").register(registry);
    FunctionCounter.builder("thaw.host.cache.evicted", cache, c -> c.stats().evictedBytes()).baseUnit("bytes")
        .description("bytes evicted from the host cache, least recently used first").register(registry);
  }

  private static double coldStarts(ImageTiers.Stats s, String tier) {
    return switch (tier) {
      case "hbm" -> s.hbmStarts();
      case "hbm-peer" -> s.hbmPeerStarts();
      case "host-cache-multilink" -> s.multiLinkStarts();
      case "host-cache" -> s.hostCacheStarts();
      default -> s.storeStarts();
    };
  }

  private static double hostCache(HostImageCache.Stats s, String state) {
    return switch (state) {
      case "capacity" -> s.capacity();
      case "used" -> s.usedBytes();
      default -> s.pinnedBytes();
    };
  }

  private static double preparing(ContextPool pool, int device) {
    for (PoolStats s : pool.stats()) {
      if (s.device() == device) {
        return s.preparing();
      }
    }
    return 0;
  }

  private static double recycles(ContextPool pool, int device) {
    for (PoolStats s : pool.stats()) {
      if (s.device() == device) {
        return s.recycled();
      }
    }
    return 0;
  }

  private static double workers(ContextPool pool, int device, String state) {
    for (PoolStats s : pool.stats()) {
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

  /**
   * For a group, each rank's state under {@code ranks}, and {@code hostCache} {@code cached} once every rank is (else
   * the first rank's that is not).
   */
  @Override
  public JsonNode imageState(String tag) {
    List<String> ranks = groups.get(tag);
    if (ranks != null) {
      ObjectNode o = JsonNodeFactory.instance.objectNode();
      String hostCache = "cached";
      for (String rank : ranks) {
        JsonNode r = imageState(rank);
        o.withArray("ranks").add(r == null ? JsonNodeFactory.instance.nullNode() : r);
        String h = r == null ? "unknown" : r.path("hostCache").asText();
        hostCache = hostCache.equals("cached") ? h : hostCache;
      }
      o.put("hostCache", hostCache);
      return o;
    }
    ImageTiers.TierState s = tiers.state(tag);
    if (s == null) {
      return null;
    }
    ObjectNode o = JsonNodeFactory.instance.objectNode();
    o.put("hostCache", s.hostCache());
    if (s.reason() != null) {
      o.put("reason", s.reason());
    }
    if (s.hostCache().equals("cached")) {
      o.put("stagedBytes", s.stagedBytes());
      o.put("stageMillis", s.stageMillis());
    }
    ObjectNode held = o.putObject("hbmBytes");
    s.hbmBytes().forEach((device, bytes) -> held.put(String.valueOf(device), bytes));
    return o;
  }

  @Override
  public long residentBytes(String tag, int device) {
    return tiers.residentBytes(tag, device);
  }

  /** Where the node's tiers price the start cheapest ({@link ImageTiers#place}). */
  @Override
  public Optional<ColdStartPlacement.Choice> place(String tag, long imageBytes,
      List<ColdStartPlacement.DeviceView> devices) {
    return tiers.place(tag, imageBytes, devices);
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
    return startBlocking(tag, manifest, new ColdStartPlacement.Choice(device, ColdStartPlacement.Source.HOST_CACHE,
        -1, 0));
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, ColdStartPlacement.Choice choice) {
    int device = choice.device();
    try {
      return start(tag, manifest, choice);
    } catch (ServeException e) {
      // Out of device memory: the HBM tier's weights go before any admission is refused.
      if (e.status() != 503 || !e.code().equals("no_capacity") || tiers.giveWay(device) == 0) {
        throw e;
      }
      return start(tag, manifest, choice);
    } catch (RuntimeException e) {
      // A start that failed with a tier's slabs in it (this device's, or the other device's it pulled from) is tried
      // once more without them (from the host cache).
      int tier = choice.source() == ColdStartPlacement.Source.HBM_PEER ? choice.tierDevice() : device;
      if (tiers.dropFromDevice(tag, device) + (tier == device ? 0 : tiers.dropFromDevice(tag, tier)) == 0) {
        throw e;
      }
      LOG.warn("{}: a start with HBM-tier slabs failed ({}); dropped them, starting from the host cache", tag,
          e.getMessage());
      return start(tag, manifest, choice);
    }
  }

  private FunctionInstance start(String tag, ImageManifest manifest, ColdStartPlacement.Choice choice) {
    int device = choice.device();
    long t = System.nanoTime();
    Worker worker = acquire(device);
    double acquireMs = (System.nanoTime() - t) / 1e6;
    ImageTiers.ColdSource cold = null;
    try {
      cold = tiers.coldStart(tag, manifest, choice);
      PreparedImage image = cold.prepared();
      BecomeResult b = image != null ? worker.becomeBlocking(image, cold.source())
          : worker.becomeBlocking(tag, cold.manifest(), cold.source());
      reportStart(worker, b);
      Map<String, Double> p = b.phases();
      // From the store the copy is "copy + verify"; from the host cache, "copy" (its bytes were verified on entry).
      double restoreMs = p.getOrDefault("copy + verify", p.getOrDefault("copy", 0.0))
          + p.getOrDefault("rebuild state", 0.0);
      // Everything else the BECOME took (parse, map, modules, the pipe both ways) is the map phase.
      double mapMs = Math.max(0, b.roundTripMillis() - restoreMs);
      // The way it went, which the choice may not be: a worker lends its restore only the links it holds open.
      String from = switch (b.source()) {
        case "hbm", "hbm-peer" -> b.source();
        case "cache" -> b.helpers().isEmpty() ? "host-cache" : "host-cache-multilink";
        default -> "store";
      };
      StartLine line = new StartLine(tag, worker.pid(), device, from + (b.helpers().isEmpty() ? ""
          : " (through devices " + b.helpers() + " as well, at share " + choice.helperShare() + ")")
          + (image != null ? ", prepared" : ""), b);
      try {
        background.execute(line);
      } catch (RejectedExecutionException closing) {
        line.run();
      }
      return new Instance(worker, new StartPhases(acquireMs, mapMs, restoreMs, b.bytes(), from), tag,
          cold.source().lease() != null && tiers.hasHbmTier(device) ? tiers : null, background);
    } catch (WorkerOutOfMemoryException e) {
      worker.release();
      abandon(cold);
      throw new ServeException(503, "no_capacity", "image '" + tag + "' does not fit on device " + device + ": "
          + e.getMessage(), retryAfterSeconds);
    } catch (RuntimeException | Error e) {
      worker.release();
      abandon(cold);
      throw e;
    }
  }

  /**
   * A group's start: a worker on rank 0's device becomes the group, rank r's image restored onto {@code devices.get(r)}
   * from its own host-cache lease (or the store) through that device's link. The instance is its worker; it is never
   * recycled, nor are its weights kept in an HBM tier.
   */
  @Override
  public FunctionInstance startGroupBlocking(String tag, GroupImage.Stored group, List<Integer> devices) {
    int n = group.ranks().size();
    if (devices.size() != n) {
      throw new IllegalArgumentException("group '" + tag + "' has " + n + " ranks, and " + devices.size()
          + " devices were chosen");
    }
    int device = devices.get(0);
    long t = System.nanoTime();
    Worker worker = acquire(device);
    double acquireMs = (System.nanoTime() - t) / 1e6;
    List<ImageTiers.ColdSource> colds = new ArrayList<>();
    try {
      List<RankImage> ranks = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        String rankTag = group.group().rankTags().get(r);
        ImageTiers.ColdSource cold = tiers.coldStart(rankTag, group.ranks().get(r), new ColdStartPlacement.Choice(
            devices.get(r), ColdStartPlacement.Source.HOST_CACHE, -1, 0));
        colds.add(cold);
        ranks.add(new RankImage(rankTag, cold.manifest(), devices.get(r), cold.source()));
      }
      PreparedImage prepared = tiers.preparedGroup(tag);
      double sourcesMs = (System.nanoTime() - t) / 1e6 - acquireMs;
      BecomeResult b = worker.becomeGroupBlocking(tag, ranks, prepared);
      reportStart(worker, b);
      double restoreMs = b.phases().getOrDefault("restore", 0.0);
      String from = b.source().equals("cache") ? "host-cache" : "store";
      StartLine line = new StartLine(tag, worker.pid(), device, "a group of " + n + " on devices " + devices
          + ", each rank from " + from + " through its own device's link" + (b.phases().containsKey("prepared")
          ? ", prepared" : "") + String.format(Locale.ROOT, " (its ranks' sources %.2f ms)", sourcesMs), b);
      try {
        background.execute(line);
      } catch (RejectedExecutionException closing) {
        line.run();
      }
      return new Instance(worker, new StartPhases(acquireMs, Math.max(0, b.roundTripMillis() - restoreMs), restoreMs,
          b.bytes(), from), tag, null, background);
    } catch (WorkerOutOfMemoryException e) {
      worker.release();
      colds.forEach(PoolInstances::abandon);
      throw new ServeException(503, "no_capacity", "group '" + tag + "' does not fit on devices " + devices + ": "
          + e.getMessage(), retryAfterSeconds);
    } catch (RuntimeException | Error e) {
      worker.release();
      colds.forEach(PoolInstances::abandon);
      throw e;
    }
  }

  /** A warm worker on {@code device}, waiting up to the acquire wait; 503 {@code no_worker} when none comes. */
  private Worker acquire(int device) {
    try {
      return pool.acquire(device, acquireWait);
    } catch (PoolExhaustedException e) {
      throw new ServeException(503, "no_worker", "no worker is free on device " + device + ": " + e.getMessage(),
          retryAfterSeconds);
    }
  }

  private void reportStart(Worker worker, BecomeResult b) {
    StartupTimeline timeline = this.timeline;
    if (timeline != null) {
      Map<String, Double> phases = new LinkedHashMap<>();
      phases.put("prepare wait", b.prepareWaitMillis());
      phases.putAll(b.phases());
      timeline.instanceStarted(worker.start(), phases);
    }
  }

  /** A cold source whose worker failed: the worker is gone or going, nothing reads the chunks for it any more. */
  private static void abandon(ImageTiers.ColdSource cold) {
    if (cold != null) {
      cold.abandon();
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
        .append(String.format(Locale.ROOT, "%.2f", v)));
    return line.toString();
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
      tiers.close();
    }
  }

  private static final class Instance implements FunctionInstance {
    private final Worker worker;
    private final StartPhases phases;
    private final String image;
    private final ImageTiers tiers;
    private final ExecutorService background;
    private volatile boolean healthy = true;

    /**
     * @param tiers where the worker's read-only slabs go when it is closed, or null to let them go
     * @param background where the restore's timeline is asked for
     */
    Instance(Worker worker, StartPhases phases, String image, ImageTiers tiers, ExecutorService background) {
      this.worker = worker;
      this.phases = phases;
      this.image = image;
      this.tiers = tiers;
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
      } catch (ExecutionException e) {
        throw e.getCause() instanceof Exception x ? x : e;
      }
    }

    /** Writes the request to the worker's pipe (a large one from the pool's I/O thread) and returns. */
    @Override
    public boolean invokesAsync() {
      return true;
    }

    @Override
    public CompletableFuture<Invoked> invoke(FunctionRequest request) {
      return invoke(request, ResponseStream.unstreamed());
    }

    /**
     * The worker's answer completes it on the pool's reader thread, after its parts (PART frames) reached
     * {@code stream}; the caller's thread only writes the frame. Cancelling the stream sends CANCEL.
     */
    @Override
    public CompletableFuture<Invoked> invoke(FunctionRequest request, ResponseStream stream) {
      byte[] json;
      try {
        json = JSON.writeValueAsBytes(request.json());
      } catch (JsonProcessingException e) {
        return CompletableFuture.failedFuture(new InvalidRequestException("the request cannot be written as JSON: "
            + e.getOriginalMessage()));
      }
      CompletableFuture<InvokeResult> sent;
      try {
        sent = worker.invoke(json, request.binary().orElse(null), null, stream);
      } catch (WorkerLostException e) {
        // Ended before the request was written: nothing of it reached the worker.
        healthy = false;
        return CompletableFuture.failedFuture(new InstanceLostException("worker " + worker.pid()
            + " ended before the request was sent (" + e.kind() + ")", e));
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
    public CompletableFuture<RestoreTimeline> restoreTimeline() {
      return worker.resident().thenComposeAsync(r -> worker.restoreTimeline(ColdStartTraces.MAX_SPANS), background)
          .thenApply(t -> new RestoreTimeline(t.chromeTrace(), t.originNanos()))
          .exceptionally(e -> null);
    }

    @Override
    public CompletableFuture<String> lost() {
      return worker.ended().thenApply(e -> e instanceof WorkerLostException ? e.kind() + ": " + e.detail() : null)
          .thenCompose(why -> why == null ? new CompletableFuture<>() : CompletableFuture.completedFuture(why));
    }

    @Override
    public boolean healthy() {
      return healthy && worker.isAlive();
    }

    @Override
    public String describe() {
      return "worker pid " + worker.pid() + " on device " + worker.device();
    }

    /**
     * Releases the worker (it is recycled or exits), first handing its read-only slabs to the HBM tier where there is
     * one.
     */
    @Override
    public void close() {
      try {
        handToTier();
      } finally {
        worker.release();
      }
    }

    private void handToTier() {
      CompletableFuture<?> resident = worker.resident();
      if (tiers == null || !healthy || !worker.isAlive() || !resident.isDone()
          || resident.isCompletedExceptionally()) {
        return;
      }
      tiers.keepOnDevice(image, worker);
    }
  }
}
