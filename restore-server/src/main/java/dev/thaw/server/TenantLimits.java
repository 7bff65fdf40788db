package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;

/**
 * What functions registered through the node socket (by a function pod, with its tenant key) may ask of the server,
 * so that no tenant can take the node from the others or look into their functions: how many functions, how many
 * instances and queued requests each, how long an idle instance may keep its GPU memory, how large an image it may
 * pull, how much device memory its instances may hold together, and which function classes its images may name (the
 * node's inference functions; never one that reads memory its caller points at, as the example memory probe does: every
 * worker maps the node's host cache, which holds every tenant's weights). A registration beyond a limit is refused
 * with 403 {@code over_limit}, naming it.
 * Functions the operator registers ({@code --function}, the config, the admin API) are not bound by them. Setters
 * check and are fluent; {@link #toJson()} / {@link #fromJson} are the JSON form ({@code "tenants"} of the server's
 * options):
 * <pre>{@code {"maxFunctions": 64, "maxFunctionsPerKey": 8, "maxInstances": 2, "maxMinInstances": 0,
 *  "maxQueueCapacity": 64, "maxKeepAlive": "3600s", "maxImageBytes": 68719476736, "maxDeviceBytes": 0,
 *  "functions": ["dev.thaw.examples.mlp.MlpFunction", "dev.thaw.examples.gpt2.Gpt2Function",
 *                "dev.thaw.examples.llama.LlamaFunction"]}}</pre>
 */
public final class TenantLimits {

  public static final int DEFAULT_MAX_FUNCTIONS = 64;
  public static final int DEFAULT_MAX_FUNCTIONS_PER_KEY = 8;
  public static final int DEFAULT_MAX_INSTANCES = 2;
  /** A tenant's function scales to zero: it keeps no instance (and no GPU memory) while nobody calls it. */
  public static final int DEFAULT_MAX_MIN_INSTANCES = 0;
  public static final int DEFAULT_MAX_QUEUE_CAPACITY = 64;
  public static final Duration DEFAULT_MAX_KEEP_ALIVE = Duration.ofHours(1);
  /** An image a tenant's registration may pull into the node's store: 64 GiB. */
  public static final long DEFAULT_MAX_IMAGE_BYTES = 64L << 30;
  /** Half of the smallest device's memory budget, for all of a function's instances together. */
  public static final long DEFAULT_MAX_DEVICE_BYTES = 0;
  /** The function classes a tenant's image may name: Thaw's inference functions. */
  public static final Set<String> DEFAULT_FUNCTIONS = Set.of("dev.thaw.examples.mlp.MlpFunction",
      "dev.thaw.examples.gpt2.Gpt2Function", "dev.thaw.examples.llama.LlamaFunction");

  private static final Set<String> FIELDS = Set.of("maxFunctions", "maxFunctionsPerKey", "maxInstances",
      "maxMinInstances", "maxQueueCapacity", "maxKeepAlive", "maxImageBytes", "maxDeviceBytes", "functions");

  private int maxFunctions = DEFAULT_MAX_FUNCTIONS;
  private int maxFunctionsPerKey = DEFAULT_MAX_FUNCTIONS_PER_KEY;
  private int maxInstances = DEFAULT_MAX_INSTANCES;
  private int maxMinInstances = DEFAULT_MAX_MIN_INSTANCES;
  private int maxQueueCapacity = DEFAULT_MAX_QUEUE_CAPACITY;
  private Duration maxKeepAlive = DEFAULT_MAX_KEEP_ALIVE;
  private long maxImageBytes = DEFAULT_MAX_IMAGE_BYTES;
  private long maxDeviceBytes = DEFAULT_MAX_DEVICE_BYTES;
  private Set<String> functions = DEFAULT_FUNCTIONS;

  public TenantLimits() {}

  public TenantLimits(TenantLimits o) {
    maxFunctions = o.maxFunctions;
    maxFunctionsPerKey = o.maxFunctionsPerKey;
    maxInstances = o.maxInstances;
    maxMinInstances = o.maxMinInstances;
    maxQueueCapacity = o.maxQueueCapacity;
    maxKeepAlive = o.maxKeepAlive;
    maxImageBytes = o.maxImageBytes;
    maxDeviceBytes = o.maxDeviceBytes;
    functions = o.functions;
  }

  public int maxFunctions() {
    return maxFunctions;
  }

  /** Functions registered through the socket on this server, all tenants together; 0 closes tenant registration. */
  public TenantLimits setMaxFunctions(int n) {
    this.maxFunctions = FunctionOptions.checkRange("maxFunctions", n, 0, 100_000);
    return this;
  }

  public int maxFunctionsPerKey() {
    return maxFunctionsPerKey;
  }

  /** Functions one tenant key may hold. */
  public TenantLimits setMaxFunctionsPerKey(int n) {
    this.maxFunctionsPerKey = FunctionOptions.checkRange("maxFunctionsPerKey", n, 1, 100_000);
    return this;
  }

  public int maxInstances() {
    return maxInstances;
  }

  /** The largest {@code maxInstances} a tenant's function may have. */
  public TenantLimits setMaxInstances(int n) {
    this.maxInstances = FunctionOptions.checkRange("maxInstances", n, 1, FunctionOptions.MAX_INSTANCES_LIMIT);
    return this;
  }

  public int maxMinInstances() {
    return maxMinInstances;
  }

  /** The largest {@code minInstances}: instances (and their device memory) kept while nobody calls. */
  public TenantLimits setMaxMinInstances(int n) {
    this.maxMinInstances = FunctionOptions.checkRange("maxMinInstances", n, 0, FunctionOptions.MAX_INSTANCES_LIMIT);
    return this;
  }

  public int maxQueueCapacity() {
    return maxQueueCapacity;
  }

  /** The largest {@code queueCapacity}: requests (and their bodies) held in the server for one function. */
  public TenantLimits setMaxQueueCapacity(int n) {
    this.maxQueueCapacity = FunctionOptions.checkRange("maxQueueCapacity", n, 0, FunctionOptions.MAX_QUEUE_CAPACITY);
    return this;
  }

  public Duration maxKeepAlive() {
    return maxKeepAlive;
  }

  /** The longest {@code keepAlive}: how long an idle instance may hold its device memory. */
  public TenantLimits setMaxKeepAlive(Duration d) {
    if (d == null || d.isNegative()) {
      throw new IllegalArgumentException("maxKeepAlive must be zero or positive");
    }
    this.maxKeepAlive = d;
    return this;
  }

  public long maxImageBytes() {
    return maxImageBytes;
  }

  /** The largest image (its distinct chunks) a tenant's registration may pull into the node's store. */
  public TenantLimits setMaxImageBytes(long bytes) {
    if (bytes < 1) {
      throw new IllegalArgumentException("maxImageBytes must be positive, not " + bytes);
    }
    this.maxImageBytes = bytes;
    return this;
  }

  public long maxDeviceBytes() {
    return maxDeviceBytes;
  }

  /**
   * Device memory all instances of one tenant's function may hold together (its image's footprint times
   * {@code maxInstances}); {@value #DEFAULT_MAX_DEVICE_BYTES} for half of the smallest device's budget.
   */
  public TenantLimits setMaxDeviceBytes(long bytes) {
    if (bytes < 0) {
      throw new IllegalArgumentException("maxDeviceBytes must be 0 (half a device) or positive, not " + bytes);
    }
    this.maxDeviceBytes = bytes;
    return this;
  }

  public Set<String> functions() {
    return functions;
  }

  /** The function classes a tenant's image may name ({@link #DEFAULT_FUNCTIONS}); empty: none. */
  public TenantLimits setFunctions(Collection<String> classNames) {
    if (classNames == null || classNames.stream().anyMatch(c -> c == null || c.isBlank())) {
      throw new IllegalArgumentException("functions are class names");
    }
    this.functions = Set.copyOf(classNames);
    return this;
  }

  /**
   * Checks the function class a tenant's image names.
   *
   * @throws ServeException 403 {@code over_limit} when it is not one of {@link #functions()}
   */
  public void checkFunction(String className) {
    if (!functions.contains(className)) {
      throw overLimit("the image's function " + className + " is not one this node runs for tenants "
          + new TreeSet<>(functions));
    }
  }

  /**
   * Checks what a tenant asks for a function.
   *
   * @throws ServeException 403 {@code over_limit} naming the first limit passed
   */
  public void check(FunctionOptions o) {
    over("maxInstances", o.maxInstances(), maxInstances);
    over("minInstances", o.minInstances(), maxMinInstances);
    over("queueCapacity", o.queueCapacity(), maxQueueCapacity);
    if (o.keepAlive().compareTo(maxKeepAlive) > 0) {
      throw overLimit("keepAlive " + o.keepAlive().toSeconds() + "s is over this node's limit for tenants ("
          + maxKeepAlive.toSeconds() + "s)");
    }
  }

  private static void over(String field, long asked, long limit) {
    if (asked > limit) {
      throw overLimit(field + " " + asked + " is over this node's limit for tenants (" + limit + ")");
    }
  }

  /** A registration this node refuses its tenants: 403 {@code over_limit}. */
  public static ServeException overLimit(String message) {
    return new ServeException(403, "over_limit", message);
  }

  public ObjectNode toJson() {
    ObjectNode json = JsonNodeFactory.instance.objectNode();
    json.put("maxFunctions", maxFunctions);
    json.put("maxFunctionsPerKey", maxFunctionsPerKey);
    json.put("maxInstances", maxInstances);
    json.put("maxMinInstances", maxMinInstances);
    json.put("maxQueueCapacity", maxQueueCapacity);
    json.put("maxKeepAlive", maxKeepAlive.toSeconds() + "s");
    json.put("maxImageBytes", maxImageBytes);
    json.put("maxDeviceBytes", maxDeviceBytes);
    ArrayNode f = json.putArray("functions");
    new TreeSet<>(functions).forEach(f::add);
    return json;
  }

  /**
   * Limits from their JSON form; absent fields keep their defaults.
   *
   * @throws IllegalArgumentException naming the first field that is unknown or wrong
   */
  public static TenantLimits fromJson(JsonNode json) {
    if (json == null || !json.isObject()) {
      throw new IllegalArgumentException("tenant limits are a JSON object");
    }
    for (Iterator<String> it = json.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!FIELDS.contains(f)) {
        throw new IllegalArgumentException("unknown field '" + f + "'; known: " + FIELDS);
      }
    }
    TenantLimits l = new TenantLimits();
    if (json.has("maxFunctions")) {
      l.setMaxFunctions(FunctionOptions.intField(json, "maxFunctions"));
    }
    if (json.has("maxFunctionsPerKey")) {
      l.setMaxFunctionsPerKey(FunctionOptions.intField(json, "maxFunctionsPerKey"));
    }
    if (json.has("maxInstances")) {
      l.setMaxInstances(FunctionOptions.intField(json, "maxInstances"));
    }
    if (json.has("maxMinInstances")) {
      l.setMaxMinInstances(FunctionOptions.intField(json, "maxMinInstances"));
    }
    if (json.has("maxQueueCapacity")) {
      l.setMaxQueueCapacity(FunctionOptions.intField(json, "maxQueueCapacity"));
    }
    if (json.has("maxKeepAlive")) {
      l.setMaxKeepAlive(ServerOptions.duration(json.get("maxKeepAlive"), "maxKeepAlive"));
    }
    if (json.has("maxImageBytes")) {
      l.setMaxImageBytes(longField(json, "maxImageBytes"));
    }
    if (json.has("maxDeviceBytes")) {
      l.setMaxDeviceBytes(longField(json, "maxDeviceBytes"));
    }
    if (json.has("functions")) {
      JsonNode f = json.get("functions");
      if (!f.isArray()) {
        throw new IllegalArgumentException("'functions' is an array of class names");
      }
      List<String> names = new ArrayList<>();
      for (JsonNode n : f) {
        if (!n.isTextual()) {
          throw new IllegalArgumentException("'functions' is an array of class names, not " + f);
        }
        names.add(n.asText());
      }
      l.setFunctions(names);
    }
    return l;
  }

  private static long longField(JsonNode json, String field) {
    JsonNode v = json.get(field);
    if (!v.isIntegralNumber() || !v.canConvertToLong()) {
      throw new IllegalArgumentException("'" + field + "' is an integer, not " + v);
    }
    return v.longValue();
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
