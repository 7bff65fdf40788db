package dev.thaw.pool;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.runtime.gpu.DeviceChoice;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * How a {@link ContextPool} runs its workers. Setters check and are fluent; {@link #toJson()} and
 * {@link #fromJson} are the JSON form (durations in milliseconds, paths as strings).
 */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class ContextPoolOptions {

  public static final List<Integer> DEFAULT_DEVICES = List.of(0);
  public static final int DEFAULT_IDLE_TARGET = 2;
  public static final int DEFAULT_MAX_WORKERS = 8;
  /** Serial GC: one collector thread per worker, not one per core; the heap holds manifests and requests only. */
  public static final List<String> DEFAULT_JVM_OPTIONS = List.of("-XX:+UseSerialGC", "-Xmx2g");
  public static final int DEFAULT_WARMUP_LAUNCHES = 3000;
  public static final int DEFAULT_MAX_PREPARED_IMAGES = 8;
  public static final long DEFAULT_START_TIMEOUT_MILLIS = 60_000;
  public static final long DEFAULT_BECOME_TIMEOUT_MILLIS = 120_000;
  public static final long DEFAULT_INVOKE_TIMEOUT_MILLIS = 60_000;
  public static final long DEFAULT_EXIT_GRACE_MILLIS = 2_000;
  /** {@link #recycleLimit()}: a worker becomes at most 65 images in its life. */
  public static final int DEFAULT_RECYCLE_LIMIT = 64;
  public static final int MAX_RECYCLE_LIMIT = 1_000_000;
  public static final long DEFAULT_RECYCLE_TIMEOUT_MILLIS = 10_000;
  public static final int DEFAULT_MAX_FRAME_BYTES = 256 << 20;
  /** {@link #wakeAhead()}: 0.5 ms. */
  public static final long DEFAULT_WAKE_AHEAD_MICROS = 500;
  /** {@link #protectAfterIdle()}: 20 ms. */
  public static final long DEFAULT_PROTECT_AFTER_IDLE_MILLIS = 20;
  /** Concurrent starts per device: JVM start and cuInit are CPU-bound; a burst of them slows every one. */
  public static final int DEFAULT_MAX_STARTING = 2;
  /** {@link #helperLinks()}: as many as a restore may use ({@code PlacementCosts.DEFAULT_MAX_HELPERS}). */
  public static final int DEFAULT_HELPER_LINKS = 3;

  /** Made at first use of the JSON form: a pool made from code on a server's way to its first worker loads no Jackson. */
  private static final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper();
  }

  @JsonProperty private List<Integer> devices = DEFAULT_DEVICES;
  @JsonProperty private int idleTarget = DEFAULT_IDLE_TARGET;
  @JsonProperty private int maxWorkers = DEFAULT_MAX_WORKERS;
  @JsonProperty private int maxStarting = DEFAULT_MAX_STARTING;
  @JsonProperty private String deviceChoice;
  @JsonProperty private String javaCommand;
  @JsonProperty private String classPath;
  @JsonProperty private List<String> jvmOptions = DEFAULT_JVM_OPTIONS;
  @JsonProperty private Map<String, String> environment = Map.of();
  @JsonProperty private String storePath;
  @JsonProperty private String hostCachePath;
  @JsonProperty private boolean awaitResident;
  @JsonProperty private int warmupLaunches = DEFAULT_WARMUP_LAUNCHES;
  @JsonProperty private String warmupImage;
  @JsonProperty private boolean warmupAfterReady;
  @JsonProperty private List<String> prepareAtStart = List.of();
  @JsonProperty private int maxPreparedImages = DEFAULT_MAX_PREPARED_IMAGES;
  @JsonProperty private long startTimeoutMillis = DEFAULT_START_TIMEOUT_MILLIS;
  @JsonProperty private long becomeTimeoutMillis = DEFAULT_BECOME_TIMEOUT_MILLIS;
  @JsonProperty private long invokeTimeoutMillis = DEFAULT_INVOKE_TIMEOUT_MILLIS;
  @JsonProperty private long exitGraceMillis = DEFAULT_EXIT_GRACE_MILLIS;
  @JsonProperty private int recycleLimit = DEFAULT_RECYCLE_LIMIT;
  @JsonProperty private long recycleTimeoutMillis = DEFAULT_RECYCLE_TIMEOUT_MILLIS;
  @JsonProperty private int maxFrameBytes = DEFAULT_MAX_FRAME_BYTES;
  @JsonProperty private String logDirectory;
  @JsonProperty private long wakeAheadMicros = DEFAULT_WAKE_AHEAD_MICROS;
  @JsonProperty private long protectAfterIdleMillis = DEFAULT_PROTECT_AFTER_IDLE_MILLIS;
  @JsonProperty private int helperLinks = DEFAULT_HELPER_LINKS;
  @JsonProperty private long helperSlotBytes = HelperLink.DEFAULT_SLOT_BYTES;
  @JsonProperty private long helperMinFreeBytes = HelperLink.DEFAULT_MIN_FREE_BYTES;

  public ContextPoolOptions() {}

  /** A copy (every value was checked when it was set). */
  public ContextPoolOptions(ContextPoolOptions o) {
    devices = new ArrayList<>(o.devices);
    idleTarget = o.idleTarget;
    maxWorkers = o.maxWorkers;
    maxStarting = o.maxStarting;
    deviceChoice = o.deviceChoice;
    javaCommand = o.javaCommand;
    classPath = o.classPath;
    jvmOptions = new ArrayList<>(o.jvmOptions);
    environment = new LinkedHashMap<>(o.environment);
    storePath = o.storePath;
    hostCachePath = o.hostCachePath;
    awaitResident = o.awaitResident;
    warmupLaunches = o.warmupLaunches;
    warmupImage = o.warmupImage;
    warmupAfterReady = o.warmupAfterReady;
    prepareAtStart = o.prepareAtStart;
    maxPreparedImages = o.maxPreparedImages;
    startTimeoutMillis = o.startTimeoutMillis;
    becomeTimeoutMillis = o.becomeTimeoutMillis;
    invokeTimeoutMillis = o.invokeTimeoutMillis;
    exitGraceMillis = o.exitGraceMillis;
    recycleLimit = o.recycleLimit;
    recycleTimeoutMillis = o.recycleTimeoutMillis;
    maxFrameBytes = o.maxFrameBytes;
    logDirectory = o.logDirectory;
    wakeAheadMicros = o.wakeAheadMicros;
    protectAfterIdleMillis = o.protectAfterIdleMillis;
    helperLinks = o.helperLinks;
    helperSlotBytes = o.helperSlotBytes;
    helperMinFreeBytes = o.helperMinFreeBytes;
  }

  /** The device ordinals the pool keeps workers for. */
  public List<Integer> devices() {
    return devices;
  }

  public ContextPoolOptions setDevices(List<Integer> devices) {
    if (devices.isEmpty() || devices.stream().anyMatch(d -> d == null || d < 0)
        || devices.stream().distinct().count() != devices.size()) {
      throw new IllegalArgumentException("devices must be distinct ordinals >= 0, at least one: " + devices);
    }
    this.devices = List.copyOf(devices);
    return this;
  }

  /** Idle ready workers kept per device; 0 spawns only on demand ({@link ContextPool#acquire} with a wait). */
  public int idleTarget() {
    return idleTarget;
  }

  public ContextPoolOptions setIdleTarget(int idleTarget) {
    if (idleTarget < 0 || idleTarget > 256) {
      throw new IllegalArgumentException("idle target must be 0..256: " + idleTarget);
    }
    this.idleTarget = idleTarget;
    return this;
  }

  /** Workers alive per device at most: idle, starting and in use. */
  public int maxWorkers() {
    return maxWorkers;
  }

  public ContextPoolOptions setMaxWorkers(int maxWorkers) {
    if (maxWorkers < 1 || maxWorkers > 1024) {
      throw new IllegalArgumentException("max workers must be 1..1024: " + maxWorkers);
    }
    this.maxWorkers = maxWorkers;
    return this;
  }

  /** Workers starting at once per device. */
  public int maxStarting() {
    return maxStarting;
  }

  public ContextPoolOptions setMaxStarting(int maxStarting) {
    if (maxStarting < 1 || maxStarting > 64) {
      throw new IllegalArgumentException("max starting must be 1..64: " + maxStarting);
    }
    this.maxStarting = maxStarting;
    return this;
  }

  /** {@code cuda}, {@code sim} or {@code auto} for the workers; null: {@code THAW_DEVICE}'s choice, as inherited. */
  public String deviceChoice() {
    return deviceChoice;
  }

  public ContextPoolOptions setDeviceChoice(String deviceChoice) {
    if (deviceChoice != null) {
      DeviceChoice.parse(deviceChoice);
    }
    this.deviceChoice = deviceChoice;
    return this;
  }

  /** The {@code java} binary for workers; null: the one running this process (the tarball's {@code runtime/}). */
  public String javaCommand() {
    return javaCommand;
  }

  public ContextPoolOptions setJavaCommand(String javaCommand) {
    this.javaCommand = javaCommand;
    return this;
  }

  /** The workers' class path; null: this process's {@code java.class.path}. */
  public String classPath() {
    return classPath;
  }

  public ContextPoolOptions setClassPath(String classPath) {
    this.classPath = classPath;
    return this;
  }

  public List<String> jvmOptions() {
    return jvmOptions;
  }

  public ContextPoolOptions setJvmOptions(List<String> jvmOptions) {
    this.jvmOptions = List.copyOf(jvmOptions);
    return this;
  }

  /** Variables added to the workers' environment (which is otherwise this process's). */
  public Map<String, String> environment() {
    return environment;
  }

  public ContextPoolOptions setEnvironment(Map<String, String> environment) {
    this.environment = Map.copyOf(environment);
    return this;
  }

  /** The store workers open read-only at start, so a BECOME from it pays no open; null for none. */
  public Path storePath() {
    return storePath == null ? null : Path.of(storePath);
  }

  public ContextPoolOptions setStorePath(Path storePath) {
    this.storePath = storePath == null ? null : storePath.toAbsolutePath().normalize().toString();
    return this;
  }

  /**
   * The host image cache's arena ({@code HostImageCache.path()}), which every worker maps read-only and registers
   * at start (seconds for a few GiB: paid while warming, never on a cold path); null for none.
   */
  public Path hostCachePath() {
    return hostCachePath == null ? null : Path.of(hostCachePath);
  }

  public ContextPoolOptions setHostCachePath(Path hostCachePath) {
    this.hostCachePath = hostCachePath == null ? null : hostCachePath.toString();
    return this;
  }

  /**
   * True: a BECOME answers once every byte is on the device (the full restore, the baseline). False (the default):
   * once the function can be invoked, on-demand restore streaming the rest behind it.
   */
  public boolean awaitResident() {
    return awaitResident;
  }

  public ContextPoolOptions setAwaitResident(boolean awaitResident) {
    this.awaitResident = awaitResident;
    return this;
  }

  /**
   * How many images ({@link ContextPool#prepare}) each idle worker keeps prepared, the most recently prepared: each
   * costs a worker its parsed manifest and its modules' device memory (kilobytes to a few megabytes).
   */
  public int maxPreparedImages() {
    return maxPreparedImages;
  }

  public ContextPoolOptions setMaxPreparedImages(int maxPreparedImages) {
    if (maxPreparedImages < 0) {
      throw new IllegalArgumentException("maxPreparedImages must be >= 0: " + maxPreparedImages);
    }
    this.maxPreparedImages = maxPreparedImages;
    return this;
  }

  /** Kernel launches each worker runs at start to warm the launch path (JIT); 0 for none. */
  public int warmupLaunches() {
    return warmupLaunches;
  }

  public ContextPoolOptions setWarmupLaunches(int warmupLaunches) {
    if (warmupLaunches < 0) {
      throw new IllegalArgumentException("warm-up launches must be >= 0: " + warmupLaunches);
    }
    this.warmupLaunches = warmupLaunches;
    return this;
  }

  /**
   * A tag in {@link #storePath()} whose image each worker restores, invokes with its sample requests and drops at
   * start, warming the whole restore and invoke path; null for none.
   */
  public String warmupImage() {
    return warmupImage;
  }

  public ContextPoolOptions setWarmupImage(String warmupImage) {
    this.warmupImage = warmupImage;
    return this;
  }

  /**
   * True: a worker says READY as soon as it can serve (driver, context, restore resources, store, host cache) and
   * warms up after it; the pool hands out warm workers first, and a caller waiting for a worker takes one still
   * warming, whose warm-up then stops. {@link ContextPool#awaitIdle} waits for warm ones. False (the default): a
   * worker is READY only once warm.
   */
  public boolean warmupAfterReady() {
    return warmupAfterReady;
  }

  public ContextPoolOptions setWarmupAfterReady(boolean warmupAfterReady) {
    this.warmupAfterReady = warmupAfterReady;
    return this;
  }

  /**
   * Tags in {@link #storePath()} each worker prepares at start ({@link PreparedImage}: manifest, class, host state,
   * modules), its store-side half beside {@code cuInit} and the context, and names in READY, so that the first cold
   * start sends no PREPARE and waits for none: the images a server serves from its first request (contract mode).
   * A tag the worker cannot prepare is said on its stderr and prepared later, as any image is. Empty: none.
   */
  public List<String> prepareAtStart() {
    return prepareAtStart;
  }

  public ContextPoolOptions setPrepareAtStart(List<String> tags) {
    if (tags.stream().anyMatch(t -> t == null || t.isBlank())) {
      throw new IllegalArgumentException("images to prepare at start must be tags: " + tags);
    }
    this.prepareAtStart = List.copyOf(tags);
    return this;
  }

  public Duration startTimeout() {
    return Duration.ofMillis(startTimeoutMillis);
  }

  /** From spawn to READY; a worker slower than that is killed and counted as a failed start. */
  public ContextPoolOptions setStartTimeout(Duration d) {
    startTimeoutMillis = positive(d, "start timeout");
    return this;
  }

  public Duration becomeTimeout() {
    return Duration.ofMillis(becomeTimeoutMillis);
  }

  public ContextPoolOptions setBecomeTimeout(Duration d) {
    becomeTimeoutMillis = positive(d, "become timeout");
    return this;
  }

  public Duration invokeTimeout() {
    return Duration.ofMillis(invokeTimeoutMillis);
  }

  public ContextPoolOptions setInvokeTimeout(Duration d) {
    invokeTimeoutMillis = positive(d, "invoke timeout");
    return this;
  }

  /** How long a released worker has to exit by itself before it is killed. */
  public Duration exitGrace() {
    return Duration.ofMillis(exitGraceMillis);
  }

  public ContextPoolOptions setExitGrace(Duration d) {
    exitGraceMillis = positive(d, "exit grace");
    return this;
  }

  /** The largest frame body either side accepts: a manifest, a request, a response. */
  public int maxFrameBytes() {
    return maxFrameBytes;
  }

  public ContextPoolOptions setMaxFrameBytes(int maxFrameBytes) {
    if (maxFrameBytes < 1 << 16) {
      throw new IllegalArgumentException("max frame bytes must be at least 64 KiB: " + maxFrameBytes);
    }
    this.maxFrameBytes = maxFrameBytes;
    return this;
  }

  /** Where each worker's stderr goes ({@code worker-<pid>.log}); null: a temporary folder removed at close. */
  public Path logDirectory() {
    return logDirectory == null ? null : Path.of(logDirectory);
  }

  public ContextPoolOptions setLogDirectory(Path logDirectory) {
    this.logDirectory = logDirectory == null ? null : logDirectory.toAbsolutePath().normalize().toString();
    return this;
  }

  /**
   * How long before an invoke's predicted end its worker sends NEAR, upon which the reader of its answers stops
   * sleeping and polls for the RESULT. A thread that slept through a long invoke may wake slowly (its core may have
   * halted: {@code docs/design/context-pool.md}, "Wake-ahead"); one that polls does not. Predicted from the worker's own
   * recent invokes; only invokes predicted to last at least 1 ms and twice this are announced, and the poll gives up
   * after three times this. {@link Duration#ZERO}: off.
   */
  public Duration wakeAhead() {
    return Duration.ofNanos(wakeAheadMicros * 1000);
  }

  public ContextPoolOptions setWakeAhead(Duration d) {
    if (d.isNegative() || d.compareTo(Duration.ofMillis(100)) > 0) {
      throw new IllegalArgumentException("wake-ahead must be 0..100 ms: " + d);
    }
    this.wakeAheadMicros = d.toNanos() / 1000;
    return this;
  }

  /**
   * How long a worker is idle after an answer before it write-protects its image's read-only slabs (once its restore
   * is resident; never under a request). Idle, so that a request right behind another does not wait for the
   * protection: {@code cuMemSetAccess} is quick alone but can take a hundred times longer while other workers start
   * beside it ({@code docs/design/memory-tiers.md}). {@link Duration#ZERO}: at once after an answer, before the next request runs (deterministic,
   * for tests).
   */
  public Duration protectAfterIdle() {
    return Duration.ofMillis(protectAfterIdleMillis);
  }

  public ContextPoolOptions setProtectAfterIdle(Duration d) {
    if (d.isNegative() || d.compareTo(Duration.ofMinutes(10)) > 0) {
      throw new IllegalArgumentException("protect-after-idle must be 0..10 min: " + d);
    }
    this.protectAfterIdleMillis = d.toMillis();
    return this;
  }

  /**
   * How many other devices each worker with a host cache lends its restore a link to (multi-link restore): after
   * READY, off the cold path, it makes a context on each (the lowest ordinals the driver lists besides its own) and a
   * {@code HelperLink} to each usable one (a peer, with memory to spare), a ring of 4 slots × {@link
   * #helperSlotBytes()} in that device's memory. A BECOME whose {@link ImageSource#helpers()} name them restores
   * through them; once its restore is resident the worker closes them, so an instance holds nothing on other devices.
   * Each idle worker holds, on each of those devices, a context and the ring. 0: none.
   */
  public int helperLinks() {
    return helperLinks;
  }

  public ContextPoolOptions setHelperLinks(int links) {
    if (links < 0 || links > 15) {
      throw new IllegalArgumentException("helper links are 0..15: " + links);
    }
    this.helperLinks = links;
    return this;
  }

  /** The bytes of each of a helper link's 4 slots (1 MiB to 1 GiB); {@code HelperLink.DEFAULT_SLOT_BYTES}, 32 MiB. */
  public long helperSlotBytes() {
    return helperSlotBytes;
  }

  public ContextPoolOptions setHelperSlotBytes(long bytes) {
    new HelperLink.Options().slotBytes(bytes);
    this.helperSlotBytes = bytes;
    return this;
  }

  /**
   * A helper device with less free memory than this besides its ring is not used (its link is not opened, or not
   * lent to a restore that finds it so); {@code HelperLink.DEFAULT_MIN_FREE_BYTES}, 2 GiB.
   */
  public long helperMinFreeBytes() {
    return helperMinFreeBytes;
  }

  public ContextPoolOptions setHelperMinFreeBytes(long bytes) {
    new HelperLink.Options().minFreeBytes(bytes);
    this.helperMinFreeBytes = bytes;
    return this;
  }

  /**
   * How many times a worker may drop an image and become blank again (so it becomes at most this many images plus
   * one in its life). A worker released after it became an image is asked to drop it (RECYCLE: the function stopped,
   * its device memory scrubbed and freed, its modules and state dropped; context, address arena, restore resources and
   * host-cache registration kept), and goes back to the idle set once it said it is blank; past the limit, or when it
   * cannot drop the image cleanly, it exits. 0: one image per worker process (the driver, not the worker, clears the
   * memory for the next process). See {@code docs/design/context-pool.md}, "Process model".
   */
  public int recycleLimit() {
    return recycleLimit;
  }

  public ContextPoolOptions setRecycleLimit(int limit) {
    if (limit < 0 || limit > MAX_RECYCLE_LIMIT) {
      throw new IllegalArgumentException("the recycle limit is 0.." + MAX_RECYCLE_LIMIT + ": " + limit);
    }
    this.recycleLimit = limit;
    return this;
  }

  /** How long a worker may take to drop its image (RECYCLE) before it is killed. */
  public Duration recycleTimeout() {
    return Duration.ofMillis(recycleTimeoutMillis);
  }

  public ContextPoolOptions setRecycleTimeout(Duration d) {
    recycleTimeoutMillis = positive(d, "recycle timeout");
    return this;
  }

  private static long positive(Duration d, String what) {
    if (d.isNegative() || d.isZero()) {
      throw new IllegalArgumentException(what + " must be positive: " + d);
    }
    return d.toMillis();
  }

  public ObjectNode toJson() {
    return Json.MAPPER.valueToTree(this);
  }

  /** Options from their JSON form; absent fields keep their defaults, and every value is checked. */
  public static ContextPoolOptions fromJson(JsonNode json) {
    return read(json);
  }

  private static ContextPoolOptions read(JsonNode json) {
    ContextPoolOptions o;
    try {
      o = Json.MAPPER.treeToValue(json, ContextPoolOptions.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("context pool options: " + e.getOriginalMessage(), e);
    }
    ContextPoolOptions checked = new ContextPoolOptions();
    checked.setDevices(o.devices).setIdleTarget(o.idleTarget).setMaxWorkers(o.maxWorkers)
        .setMaxStarting(o.maxStarting).setDeviceChoice(o.deviceChoice).setJavaCommand(o.javaCommand)
        .setClassPath(o.classPath).setJvmOptions(new ArrayList<>(o.jvmOptions))
        .setEnvironment(new LinkedHashMap<>(o.environment)).setWarmupLaunches(o.warmupLaunches)
        .setWarmupImage(o.warmupImage).setMaxFrameBytes(o.maxFrameBytes)
        .setMaxPreparedImages(o.maxPreparedImages)
        .setPrepareAtStart(o.prepareAtStart == null ? List.of() : o.prepareAtStart);
    checked.storePath = o.storePath;
    checked.hostCachePath = o.hostCachePath;
    checked.awaitResident = o.awaitResident;
    checked.warmupAfterReady = o.warmupAfterReady;
    checked.logDirectory = o.logDirectory;
    checked.setStartTimeout(Duration.ofMillis(o.startTimeoutMillis))
        .setBecomeTimeout(Duration.ofMillis(o.becomeTimeoutMillis))
        .setInvokeTimeout(Duration.ofMillis(o.invokeTimeoutMillis))
        .setExitGrace(Duration.ofMillis(o.exitGraceMillis))
        .setWakeAhead(Duration.ofNanos(o.wakeAheadMicros * 1000))
        .setProtectAfterIdle(Duration.ofMillis(o.protectAfterIdleMillis))
        .setHelperLinks(o.helperLinks).setHelperSlotBytes(o.helperSlotBytes)
        .setHelperMinFreeBytes(o.helperMinFreeBytes).setRecycleLimit(o.recycleLimit)
        .setRecycleTimeout(Duration.ofMillis(o.recycleTimeoutMillis));
    return checked;
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
