package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.management.OperatingSystemMXBean;
import dev.thaw.image.registry.RegistryOptions;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PlacementCosts;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * How a {@link ThawServer} listens, guards and serves. Setters check and are fluent; {@link #toJson()} and
 * {@link #fromJson} are the JSON form ({@code thaw serve --config FILE}):
 * <pre>{@code
 * {"host": "127.0.0.1", "port": 8080, "invokePort": -1, "socket": null, "adminToken": null,
 *  "maxBodyBytes": 16777216, "maxJsonDepth": 64, "drainTimeout": "30s", "retryAfter": "1s",
 *  "gpuMemoryBytes": 0, "hostCacheBytes": 8589934592, "hbmTierBytes": 17179869184, "wakeAhead": "500us",
 *  "maxWorkers": 8, "maxStarting": 4, "recycleLimit": 64, "tierPolicy": "recency", "maxHelpers": 3,
 *  "helperShare": 0.5,
 *  "maxConnections": 4096, "headerTimeout": "10s", "bodyTimeout": "30s", "idleTimeout": "60s",
 *  "maxPulls": 2, "tenants": {"maxFunctions": 64, ...}, "labels": {"service": "mlp"},
 *  "functions": {"mlp": {"image": "mlp:1", "maxInstances": 2}}}
 * }</pre>
 */
public final class ServerOptions {

  public static final String DEFAULT_HOST = "127.0.0.1";
  public static final int DEFAULT_PORT = 8080;
  /** No TCP listener: the server listens on its {@link #socketPath()} only. */
  public static final int NO_PORT = -1;
  /** No separate port: invoke endpoints are served on {@link #port()} with the rest. */
  public static final int NO_INVOKE_PORT = -1;
  public static final long DEFAULT_MAX_BODY_BYTES = 16L << 20;
  public static final int DEFAULT_MAX_JSON_DEPTH = 64;
  public static final Duration DEFAULT_DRAIN_TIMEOUT = Duration.ofSeconds(30);
  public static final Duration DEFAULT_RETRY_AFTER = Duration.ofSeconds(1);
  /** Use each device's whole memory as the budget for instances. */
  public static final long DEFAULT_GPU_MEMORY_BYTES = 0;
  /**
   * The pinned host image cache that pool-backed instances restore from: 8 GiB, or a quarter of the host's memory
   * where that is less (shared memory; pages are taken only as images are staged).
   */
  public static final long DEFAULT_HOST_CACHE_BYTES = Math.min(8L << 30, physicalMemory() / 4);
  /** Device memory per device that weights of scaled-in instances may keep (the HBM tier): 16 GiB. */
  public static final long DEFAULT_HBM_TIER_BYTES = 16L << 30;
  /** The admin token's file, in the store's folder: created with mode 0600 at first start. */
  public static final String ADMIN_TOKEN_FILE = "admin-token";
  /** Cold-start timelines kept per function for {@code /v1/functions/{name}/trace}. */
  public static final int DEFAULT_TRACES_KEPT = 16;
  /** {@link #wakeAhead()}: 0.5 ms. */
  public static final Duration DEFAULT_WAKE_AHEAD = Duration.ofNanos(500_000);
  /** {@link #maxWorkers()}: the pool's worker processes per device, idle and in use. */
  public static final int DEFAULT_MAX_WORKERS = 8;
  /**
   * {@link #maxStarting()}: worker processes started at once per device, a quarter of the cores (at least 2). A node
   * of many functions spends a worker on every cold start of another function, so how fast it starts them bounds its
   * rate of cold starts.
   */
  public static final int DEFAULT_MAX_STARTING = Math.max(2, Runtime.getRuntime().availableProcessors() / 4);
  /** {@link #recycleLimit()}: {@code ContextPoolOptions.DEFAULT_RECYCLE_LIMIT}. */
  public static final int DEFAULT_RECYCLE_LIMIT = ContextPoolOptions.DEFAULT_RECYCLE_LIMIT;
  /** {@link #tierPolicy()}: what the node keeps in its tiers, by cold-start recency. */
  public static final String DEFAULT_TIER_POLICY = "recency";
  /** {@link #maxConnections()}: 4096 per port, well under the file descriptors a server is given. */
  public static final int DEFAULT_MAX_CONNECTIONS = 4096;
  public static final Duration DEFAULT_HEADER_TIMEOUT = Duration.ofSeconds(10);
  public static final Duration DEFAULT_BODY_TIMEOUT = Duration.ofSeconds(30);
  public static final Duration DEFAULT_IDLE_TIMEOUT = Duration.ofSeconds(60);
  /** Image pulls from registries that run at once ({@link #maxPulls()}); more wait for one to end. */
  public static final int DEFAULT_MAX_PULLS = 2;
  /** {@link #maxHelpers()}: other devices' links one cold start may borrow. */
  public static final int DEFAULT_MAX_HELPERS = PlacementCosts.DEFAULT_MAX_HELPERS;
  /**
   * {@link #helperShare()}: an idle helper lends half its link, so that a request reaching a function on it meanwhile
   * stays within 5% of its warm latency ({@code scripts/gpu/multilink-run.sh} measures that cost at the share in use).
   */
  public static final double DEFAULT_HELPER_SHARE = PlacementCosts.DEFAULT_HELPER_SHARE;

  private static final Set<String> FIELDS = Set.of("host", "port", "invokePort", "storePath", "adminToken",
      "maxBodyBytes", "maxJsonDepth", "drainTimeout", "retryAfter", "gpuMemoryBytes", "labels", "functions",
      "tracesKept", "hostCacheBytes", "hbmTierBytes", "wakeAhead", "maxWorkers", "maxStarting", "tierPolicy",
      "maxConnections", "recycleLimit",
      "headerTimeout", "bodyTimeout", "idleTimeout", "socket", "maxPulls", "tenants", "maxHelpers", "helperShare");
  private static final Pattern DURATION = Pattern.compile("([0-9]+(?:\\.[0-9]+)?)(ms|us|s|m)?");

  private String host = DEFAULT_HOST;
  private int port = DEFAULT_PORT;
  private int invokePort = NO_INVOKE_PORT;
  private Path storePath;
  private String adminToken;
  private long maxBodyBytes = DEFAULT_MAX_BODY_BYTES;
  private int maxJsonDepth = DEFAULT_MAX_JSON_DEPTH;
  private Duration drainTimeout = DEFAULT_DRAIN_TIMEOUT;
  private Duration retryAfter = DEFAULT_RETRY_AFTER;
  private long gpuMemoryBytes = DEFAULT_GPU_MEMORY_BYTES;
  private long hostCacheBytes = DEFAULT_HOST_CACHE_BYTES;
  private long hbmTierBytes = DEFAULT_HBM_TIER_BYTES;
  private int tracesKept = DEFAULT_TRACES_KEPT;
  private Duration wakeAhead = DEFAULT_WAKE_AHEAD;
  private int maxWorkers = DEFAULT_MAX_WORKERS;
  private int maxStarting = DEFAULT_MAX_STARTING;
  private int recycleLimit = DEFAULT_RECYCLE_LIMIT;
  private String tierPolicy = DEFAULT_TIER_POLICY;
  private int maxConnections = DEFAULT_MAX_CONNECTIONS;
  private Duration headerTimeout = DEFAULT_HEADER_TIMEOUT;
  private Duration bodyTimeout = DEFAULT_BODY_TIMEOUT;
  private Duration idleTimeout = DEFAULT_IDLE_TIMEOUT;
  private Path socketPath;
  private int maxPulls = DEFAULT_MAX_PULLS;
  private RegistryOptions registry = new RegistryOptions();
  private TenantLimits tenants = new TenantLimits();
  private int maxHelpers = DEFAULT_MAX_HELPERS;
  private double helperShare = DEFAULT_HELPER_SHARE;
  private final Map<String, String> labels = new LinkedHashMap<>();
  private final Map<String, FunctionOptions> functions = new LinkedHashMap<>();

  public ServerOptions() {}

  public ServerOptions(ServerOptions o) {
    host = o.host;
    port = o.port;
    invokePort = o.invokePort;
    storePath = o.storePath;
    adminToken = o.adminToken;
    maxBodyBytes = o.maxBodyBytes;
    maxJsonDepth = o.maxJsonDepth;
    drainTimeout = o.drainTimeout;
    retryAfter = o.retryAfter;
    gpuMemoryBytes = o.gpuMemoryBytes;
    hostCacheBytes = o.hostCacheBytes;
    hbmTierBytes = o.hbmTierBytes;
    tracesKept = o.tracesKept;
    wakeAhead = o.wakeAhead;
    maxWorkers = o.maxWorkers;
    maxStarting = o.maxStarting;
    recycleLimit = o.recycleLimit;
    tierPolicy = o.tierPolicy;
    maxConnections = o.maxConnections;
    headerTimeout = o.headerTimeout;
    bodyTimeout = o.bodyTimeout;
    idleTimeout = o.idleTimeout;
    socketPath = o.socketPath;
    maxPulls = o.maxPulls;
    registry = new RegistryOptions(o.registry);
    tenants = new TenantLimits(o.tenants);
    maxHelpers = o.maxHelpers;
    helperShare = o.helperShare;
    labels.putAll(o.labels);
    o.functions.forEach((k, v) -> functions.put(k, new FunctionOptions(v)));
  }

  public String host() {
    return host;
  }

  /** The address to listen on; loopback by default, {@code 0.0.0.0} for every interface. */
  public ServerOptions setHost(String host) {
    if (host == null || host.isBlank()) {
      throw new IllegalArgumentException("host must be an address or a name");
    }
    this.host = host;
    return this;
  }

  public int port() {
    return port;
  }

  /**
   * The port for every endpoint; 0 picks a free one ({@link ThawServer#port()} says which); {@link #NO_PORT} for no
   * TCP listener at all (then a {@link #socketPath()} is needed).
   */
  public ServerOptions setPort(int port) {
    this.port = port == NO_PORT ? port : FunctionOptions.checkRange("port", port, 0, 65535);
    return this;
  }

  public int invokePort() {
    return invokePort;
  }

  /**
   * A second port for the invoke endpoints only (native invoke, KServe v2, completions, health), so that the
   * admin API and metrics need not be exposed with them; {@link #NO_INVOKE_PORT} for none.
   */
  public ServerOptions setInvokePort(int port) {
    this.invokePort = port == NO_INVOKE_PORT ? port : FunctionOptions.checkRange("invokePort", port, 0, 65535);
    return this;
  }

  public Path storePath() {
    return storePath;
  }

  /** The store's folder: where the admin token is kept when none is given. */
  public ServerOptions setStorePath(Path path) {
    this.storePath = path;
    return this;
  }

  public String adminToken() {
    return adminToken;
  }

  /** The bearer token the admin API asks for; null to read (or make) {@value #ADMIN_TOKEN_FILE} in the store. */
  public ServerOptions setAdminToken(String token) {
    if (token != null && token.length() < 16) {
      throw new IllegalArgumentException("an admin token needs at least 16 characters");
    }
    this.adminToken = token;
    return this;
  }

  public long maxBodyBytes() {
    return maxBodyBytes;
  }

  /** The largest request body; a larger one is refused with 413 before it is read whole. */
  public ServerOptions setMaxBodyBytes(long bytes) {
    if (bytes < 1024 || bytes > (1L << 31) - 1) {
      throw new IllegalArgumentException("maxBodyBytes must be 1 KiB to 2 GiB, not " + bytes);
    }
    this.maxBodyBytes = bytes;
    return this;
  }

  public int maxJsonDepth() {
    return maxJsonDepth;
  }

  /** The deepest nesting of arrays and objects a JSON body may have; deeper is refused with 400. */
  public ServerOptions setMaxJsonDepth(int depth) {
    this.maxJsonDepth = FunctionOptions.checkRange("maxJsonDepth", depth, 2, 1000);
    return this;
  }

  public Duration drainTimeout() {
    return drainTimeout;
  }

  /** On SIGTERM or {@link ThawServer#drain}: how long in-flight and queued requests may take to finish. */
  public ServerOptions setDrainTimeout(Duration d) {
    if (d == null || d.isNegative()) {
      throw new IllegalArgumentException("drainTimeout must be zero or positive");
    }
    this.drainTimeout = d;
    return this;
  }

  public Duration retryAfter() {
    return retryAfter;
  }

  /** The {@code Retry-After} a 429 or 503 carries (whole seconds, at least 1). */
  public ServerOptions setRetryAfter(Duration d) {
    if (d == null || d.isNegative()) {
      throw new IllegalArgumentException("retryAfter must be zero or positive");
    }
    this.retryAfter = d;
    return this;
  }

  public long gpuMemoryBytes() {
    return gpuMemoryBytes;
  }

  /**
   * Device memory each device may give to instances; {@value #DEFAULT_GPU_MEMORY_BYTES} for its whole memory.
   * An instance that does not fit (after idle instances of other functions are evicted) is refused with 503.
   */
  public ServerOptions setGpuMemoryBytes(long bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("gpuMemoryBytes must be 0 (the device's) or positive");
    }
    this.gpuMemoryBytes = bytes;
    return this;
  }

  public long hostCacheBytes() {
    return hostCacheBytes;
  }

  /**
   * The host image cache's size for pool-backed instances ({@link #DEFAULT_HOST_CACHE_BYTES} by default); 0 turns
   * it off, and workers then read every image from the store. A function's image is staged into it when the
   * function is registered; one that does not fit is read from the store (its state says so).
   */
  public ServerOptions setHostCacheBytes(long bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("hostCacheBytes must be 0 (no host cache) or positive");
    }
    this.hostCacheBytes = bytes;
    return this;
  }

  public long hbmTierBytes() {
    return hbmTierBytes;
  }

  /**
   * Device bytes per device the HBM tier may hold ({@link #DEFAULT_HBM_TIER_BYTES}): when a pool-backed instance
   * is scaled in or evicted, its read-only weights stay on the GPU for the next instance of its image, unless an
   * admission needs the memory. 0 turns it off. Needs the host cache.
   */
  public ServerOptions setHbmTierBytes(long bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("hbmTierBytes must be 0 (no HBM tier) or positive");
    }
    this.hbmTierBytes = bytes;
    return this;
  }

  public int maxWorkers() {
    return maxWorkers;
  }

  /**
   * Worker processes the pool keeps per device, idle and in use ({@link #DEFAULT_MAX_WORKERS}): with pool-backed
   * instances, at most this many less the idle ones are instances at once on a device, and a cold start evicts the
   * least recently used idle instance of another function beyond that.
   */
  public ServerOptions setMaxWorkers(int maxWorkers) {
    this.maxWorkers = FunctionOptions.checkRange("maxWorkers", maxWorkers, 1, 1024);
    return this;
  }

  public int maxStarting() {
    return maxStarting;
  }

  /** Worker processes the pool starts at once per device ({@link #DEFAULT_MAX_STARTING}). */
  public ServerOptions setMaxStarting(int maxStarting) {
    this.maxStarting = FunctionOptions.checkRange("maxStarting", maxStarting, 1, 64);
    return this;
  }

  /**
   * How many times a worker that scaled to zero may drop its image and become blank again for another function,
   * instead of exiting ({@code ContextPoolOptions.recycleLimit()}): a cold start then finds a warm worker rather than
   * waiting for a process to start. 0: every worker becomes one image in its life.
   */
  public int recycleLimit() {
    return recycleLimit;
  }

  public ServerOptions setRecycleLimit(int recycleLimit) {
    this.recycleLimit = FunctionOptions.checkRange("recycleLimit", recycleLimit, 0,
        ContextPoolOptions.MAX_RECYCLE_LIMIT);
    return this;
  }

  public String tierPolicy() {
    return tierPolicy;
  }

  /**
   * What the node's tiers keep between cold starts ({@code docs/design/memory-tiers.md}): {@code recency} (the
   * default: a registration stages its image only into free host-cache space; cold starts decide what stays) or
   * {@code registration} (every registration stages, evicting the least recently used: the policy-free baseline).
   */
  public ServerOptions setTierPolicy(String policy) {
    if (!"recency".equals(policy) && !"registration".equals(policy)) {
      throw new IllegalArgumentException("tierPolicy is recency or registration, not '" + policy + "'");
    }
    this.tierPolicy = policy;
    return this;
  }

  public int maxHelpers() {
    return maxHelpers;
  }

  /**
   * How many other GPUs' links one pool-backed cold start may borrow besides its own ({@link #DEFAULT_MAX_HELPERS};
   * 0: each start through its own GPU's link alone). A start restoring from the host cache stages part of its image
   * through idle GPUs' links and pulls it over NVLink; a GPU counts as idle when no instance there is starting, serving
   * a request or served one within the last 100 ms. Each idle worker keeps a context and a 128 MiB ring on each of
   * that many other GPUs ({@code docs/design/memory-tiers.md}, "Under the PCIe floor").
   */
  public ServerOptions setMaxHelpers(int n) {
    this.maxHelpers = FunctionOptions.checkRange("maxHelpers", n, 0, 15);
    return this;
  }

  public double helperShare() {
    return helperShare;
  }

  /**
   * The part of each borrowed GPU's link a cold start may use, over (0, 1] ({@link #DEFAULT_HELPER_SHARE}): below 1
   * the restore paces what it sends through a helper, leaving the rest of its link to work there.
   */
  public ServerOptions setHelperShare(double share) {
    if (!(share > 0 && share <= 1)) {
      throw new IllegalArgumentException("helperShare is over (0, 1], not " + share);
    }
    this.helperShare = share;
    return this;
  }

  private static long physicalMemory() {
    if (ManagementFactory.getOperatingSystemMXBean() instanceof OperatingSystemMXBean sun) {
      return sun.getTotalMemorySize();
    }
    return 32L << 30;
  }

  public int tracesKept() {
    return tracesKept;
  }

  public ServerOptions setTracesKept(int n) {
    this.tracesKept = FunctionOptions.checkRange("tracesKept", n, 0, 1024);
    return this;
  }

  public Duration wakeAhead() {
    return wakeAhead;
  }

  /**
   * How long before a warm invoke's predicted end (its function's recent invokes, smoothed) the threads that carry
   * its answer stop sleeping and poll: the event loop that answers the request, and, for a pooled instance, the
   * reader of its worker's pipe (the worker says NEAR). A thread that slept through a long invoke may wake slowly
   * (its core may have halted), each hop paying it again ({@code docs/design/server.md}, "Wake-ahead on long
   * invokes"). Only invokes predicted to last at least 1 ms and twice this, and only while at most a quarter of the
   * cores' worth of instances invoke; a poll gives up after three times this. Zero: off.
   */
  public ServerOptions setWakeAhead(Duration d) {
    if (d == null || d.isNegative() || d.compareTo(Duration.ofMillis(100)) > 0) {
      throw new IllegalArgumentException("wakeAhead must be 0..100ms");
    }
    this.wakeAhead = d;
    return this;
  }

  public int maxConnections() {
    return maxConnections;
  }

  /**
   * The most connections each port keeps open. A connection beyond it closes the oldest one that has no request in
   * flight (one still sending its request's head, or idle between requests), or is itself closed when every one has:
   * a flood of connections that never finish a request cannot take the server to its file descriptor limit, and a
   * health check or an invoke still gets in.
   */
  public ServerOptions setMaxConnections(int n) {
    this.maxConnections = FunctionOptions.checkRange("maxConnections", n, 1, 1 << 20);
    return this;
  }

  public Duration headerTimeout() {
    return headerTimeout;
  }

  /** How long a new connection may take to send its first request's head (line and headers); then it is closed. */
  public ServerOptions setHeaderTimeout(Duration d) {
    this.headerTimeout = checkTimeout(d, "headerTimeout");
    return this;
  }

  public Duration bodyTimeout() {
    return bodyTimeout;
  }

  /**
   * How long a request's body may take to arrive whole after its head: then it is answered 408 and its connection
   * closed. The function's own time does not count.
   */
  public ServerOptions setBodyTimeout(Duration d) {
    this.bodyTimeout = checkTimeout(d, "bodyTimeout");
    return this;
  }

  public Duration idleTimeout() {
    return idleTimeout;
  }

  /**
   * How long a connection may wait between requests, or go without a byte either way while a response is written,
   * before it is closed.
   */
  public ServerOptions setIdleTimeout(Duration d) {
    this.idleTimeout = checkTimeout(d, "idleTimeout");
    return this;
  }

  private static Duration checkTimeout(Duration d, String field) {
    if (d == null || d.compareTo(Duration.ofMillis(100)) < 0 || d.compareTo(Duration.ofHours(1)) > 0) {
      throw new IllegalArgumentException(field + " must be 100ms..1h, not " + d);
    }
    return d;
  }

  public Path socketPath() {
    return socketPath;
  }

  /**
   * A Unix domain socket to listen on besides the TCP port (or instead of it, with {@link #NO_PORT}): node mode's
   * listener, through which the function pods of a node register their functions and forward their requests
   * ({@code docs/design/server.md}, "Node mode"). It serves the invoke endpoints and tenant registration only, never
   * the admin API or metrics. The file is made at start (a stale one left by a server that died is replaced;
   * one another server listens on is refused), readable and writable by everyone (access is by each function's
   * credential), and removed at close. Null: none.
   */
  public ServerOptions setSocketPath(Path path) {
    if (path != null && path.toString().getBytes(StandardCharsets.UTF_8).length > 107) {
      throw new IllegalArgumentException("a socket path is at most 107 bytes (the kernel's limit), not " + path);
    }
    this.socketPath = path;
    return this;
  }

  public int maxPulls() {
    return maxPulls;
  }

  /** Pulls of registry references that run at once; more wait. */
  public ServerOptions setMaxPulls(int n) {
    this.maxPulls = FunctionOptions.checkRange("maxPulls", n, 1, 64);
    return this;
  }

  /** How functions registered by a registry reference are pulled: credentials, retries, parallel transfers. */
  public RegistryOptions registry() {
    return registry;
  }

  /** Not part of the JSON form: credentials come from a login file ({@code THAW_REGISTRY_AUTH}), never a config. */
  public ServerOptions setRegistry(RegistryOptions registry) {
    this.registry = new RegistryOptions(registry);
    return this;
  }

  /** What a function registered through the node socket may ask for. */
  public TenantLimits tenants() {
    return tenants;
  }

  public ServerOptions setTenants(TenantLimits limits) {
    this.tenants = new TenantLimits(limits);
    return this;
  }

  /** Labels on every log line and metric, e.g. Knative's {@code service}, {@code revision}, {@code configuration}. */
  public Map<String, String> labels() {
    return labels;
  }

  public ServerOptions putLabel(String name, String value) {
    if (name == null || !name.matches("[a-z_][a-z0-9_]*") || value == null) {
      throw new IllegalArgumentException("a label name is lower-case letters, digits and _: " + name);
    }
    labels.put(name, value);
    return this;
  }

  /** The functions registered at start, by name. */
  public Map<String, FunctionOptions> functions() {
    return functions;
  }

  public ServerOptions addFunction(String name, FunctionOptions options) {
    functions.put(FunctionNames.check(name), options.validate());
    return this;
  }

  public ObjectNode toJson() {
    ObjectNode json = JsonNodeFactory.instance.objectNode();
    json.put("host", host);
    json.put("port", port);
    json.put("invokePort", invokePort);
    json.put("socket", socketPath == null ? null : socketPath.toString());
    json.put("storePath", storePath == null ? null : storePath.toString());
    json.put("adminToken", adminToken == null ? null : "(set)");
    json.put("maxBodyBytes", maxBodyBytes);
    json.put("maxJsonDepth", maxJsonDepth);
    json.put("drainTimeout", drainTimeout.toMillis() + "ms");
    json.put("retryAfter", retryAfter.toMillis() + "ms");
    json.put("gpuMemoryBytes", gpuMemoryBytes);
    json.put("hostCacheBytes", hostCacheBytes);
    json.put("hbmTierBytes", hbmTierBytes);
    json.put("tracesKept", tracesKept);
    json.put("wakeAhead", wakeAhead.toNanos() / 1000 + "us");
    json.put("maxWorkers", maxWorkers);
    json.put("maxStarting", maxStarting);
    json.put("recycleLimit", recycleLimit);
    json.put("tierPolicy", tierPolicy);
    json.put("maxConnections", maxConnections);
    json.put("headerTimeout", headerTimeout.toMillis() + "ms");
    json.put("bodyTimeout", bodyTimeout.toMillis() + "ms");
    json.put("idleTimeout", idleTimeout.toMillis() + "ms");
    json.put("maxPulls", maxPulls);
    json.set("tenants", tenants.toJson());
    json.put("maxHelpers", maxHelpers);
    json.put("helperShare", helperShare);
    ObjectNode l = json.putObject("labels");
    labels.forEach(l::put);
    ObjectNode f = json.putObject("functions");
    functions.forEach((k, v) -> f.set(k, v.toJson()));
    return json;
  }

  /**
   * Options from their JSON form; absent fields keep their defaults.
   *
   * @throws IllegalArgumentException naming the first field that is unknown or wrong
   */
  public static ServerOptions fromJson(JsonNode json) {
    if (json == null || !json.isObject()) {
      throw new IllegalArgumentException("server options are a JSON object");
    }
    for (Iterator<String> it = json.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!FIELDS.contains(f)) {
        throw new IllegalArgumentException("unknown field '" + f + "'; known: " + FIELDS);
      }
    }
    ServerOptions o = new ServerOptions();
    if (json.hasNonNull("host")) {
      o.setHost(json.get("host").asText());
    }
    if (json.has("port")) {
      o.setPort(FunctionOptions.intField(json, "port"));
    }
    if (json.has("invokePort")) {
      o.setInvokePort(FunctionOptions.intField(json, "invokePort"));
    }
    if (json.hasNonNull("socket")) {
      if (!json.get("socket").isTextual()) {
        throw new IllegalArgumentException("'socket' is a path, a string");
      }
      o.setSocketPath(Path.of(json.get("socket").asText()));
    }
    if (json.has("maxPulls")) {
      o.setMaxPulls(FunctionOptions.intField(json, "maxPulls"));
    }
    if (json.has("tenants")) {
      try {
        o.setTenants(TenantLimits.fromJson(json.get("tenants")));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("tenants: " + e.getMessage(), e);
      }
    }
    if (json.hasNonNull("storePath")) {
      o.setStorePath(Path.of(json.get("storePath").asText()));
    }
    if (json.hasNonNull("adminToken")) {
      o.setAdminToken(json.get("adminToken").asText());
    }
    if (json.has("maxBodyBytes")) {
      JsonNode v = json.get("maxBodyBytes");
      if (!v.isIntegralNumber()) {
        throw new IllegalArgumentException("'maxBodyBytes' is an integer, not " + v);
      }
      o.setMaxBodyBytes(v.longValue());
    }
    if (json.has("maxJsonDepth")) {
      o.setMaxJsonDepth(FunctionOptions.intField(json, "maxJsonDepth"));
    }
    if (json.has("drainTimeout")) {
      o.setDrainTimeout(duration(json.get("drainTimeout"), "drainTimeout"));
    }
    if (json.has("retryAfter")) {
      o.setRetryAfter(duration(json.get("retryAfter"), "retryAfter"));
    }
    if (json.has("gpuMemoryBytes")) {
      JsonNode v = json.get("gpuMemoryBytes");
      if (!v.isIntegralNumber()) {
        throw new IllegalArgumentException("'gpuMemoryBytes' is an integer, not " + v);
      }
      o.setGpuMemoryBytes(v.longValue());
    }
    if (json.has("hostCacheBytes")) {
      JsonNode v = json.get("hostCacheBytes");
      if (!v.isIntegralNumber()) {
        throw new IllegalArgumentException("'hostCacheBytes' is an integer, not " + v);
      }
      o.setHostCacheBytes(v.longValue());
    }
    if (json.has("hbmTierBytes")) {
      JsonNode v = json.get("hbmTierBytes");
      if (!v.isIntegralNumber()) {
        throw new IllegalArgumentException("'hbmTierBytes' is an integer, not " + v);
      }
      o.setHbmTierBytes(v.longValue());
    }
    if (json.has("tracesKept")) {
      o.setTracesKept(FunctionOptions.intField(json, "tracesKept"));
    }
    if (json.has("wakeAhead")) {
      o.setWakeAhead(duration(json.get("wakeAhead"), "wakeAhead"));
    }
    if (json.has("maxWorkers")) {
      o.setMaxWorkers(FunctionOptions.intField(json, "maxWorkers"));
    }
    if (json.has("maxStarting")) {
      o.setMaxStarting(FunctionOptions.intField(json, "maxStarting"));
    }
    if (json.has("recycleLimit")) {
      o.setRecycleLimit(FunctionOptions.intField(json, "recycleLimit"));
    }
    if (json.hasNonNull("tierPolicy")) {
      o.setTierPolicy(json.get("tierPolicy").asText());
    }
    if (json.has("maxConnections")) {
      o.setMaxConnections(FunctionOptions.intField(json, "maxConnections"));
    }
    if (json.has("headerTimeout")) {
      o.setHeaderTimeout(duration(json.get("headerTimeout"), "headerTimeout"));
    }
    if (json.has("bodyTimeout")) {
      o.setBodyTimeout(duration(json.get("bodyTimeout"), "bodyTimeout"));
    }
    if (json.has("idleTimeout")) {
      o.setIdleTimeout(duration(json.get("idleTimeout"), "idleTimeout"));
    }
    if (json.has("maxHelpers")) {
      o.setMaxHelpers(FunctionOptions.intField(json, "maxHelpers"));
    }
    if (json.has("helperShare")) {
      JsonNode v = json.get("helperShare");
      if (!v.isNumber()) {
        throw new IllegalArgumentException("'helperShare' is a number over (0, 1], not " + v);
      }
      o.setHelperShare(v.doubleValue());
    }
    if (json.has("labels")) {
      JsonNode l = json.get("labels");
      if (!l.isObject()) {
        throw new IllegalArgumentException("'labels' is an object of strings");
      }
      l.fields().forEachRemaining(e -> o.putLabel(e.getKey(), e.getValue().asText()));
    }
    if (json.has("functions")) {
      JsonNode f = json.get("functions");
      if (!f.isObject()) {
        throw new IllegalArgumentException("'functions' is an object: name -> function options");
      }
      for (Iterator<Map.Entry<String, JsonNode>> it = f.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        try {
          o.addFunction(e.getKey(), FunctionOptions.fromJson(e.getValue()));
        } catch (IllegalArgumentException ex) {
          throw new IllegalArgumentException("function '" + e.getKey() + "': " + ex.getMessage(), ex);
        }
      }
    }
    return o;
  }

  /** A duration as the JSON form writes it ({@code "500us"}, {@code "250ms"}, {@code "30s"}, {@code "5m"}). */
  public static Duration parseDuration(String text, String field) {
    return duration(JsonNodeFactory.instance.textNode(text), field);
  }

  /** {@code "30s"}, {@code "250ms"}, {@code "500us"}, {@code "5m"}, or a number of seconds. */
  static Duration duration(JsonNode v, String field) {
    if (v.isNumber()) {
      return Duration.ofMillis(Math.round(v.doubleValue() * 1000));
    }
    Matcher m = DURATION.matcher(v.asText().trim());
    if (!v.isTextual() || !m.matches()) {
      throw new IllegalArgumentException("'" + field + "' is a duration such as \"30s\", \"250ms\", \"500us\" or "
          + "\"5m\", not " + v);
    }
    double n = Double.parseDouble(m.group(1));
    String unit = m.group(2) == null ? "s" : m.group(2);
    double nanos = switch (unit) {
      case "us" -> n * 1e3;
      case "ms" -> n * 1e6;
      case "m" -> n * 60e9;
      default -> n * 1e9;
    };
    return Duration.ofNanos(Math.round(nanos));
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
