package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Iterator;
import java.util.Set;

/**
 * How one function is served: which image, how many instances, how long an idle one is kept, how many
 * requests may wait. Setters check and are fluent; {@link #toJson()} / {@link #fromJson} are the JSON form,
 * which is also the body of {@code PUT /v1/functions/{name}}:
 * <pre>{@code {"image": "mlp:1", "minInstances": 0, "maxInstances": 2, "keepAlive": "300s", "queueCapacity": 64}}</pre>
 *
 * <p>The image is a tag in the server's store, or a registry reference ({@code host[:port]/repository[:tag]
 * [@sha256:...]}, always with a {@code /}; a tag never has one), which the server pulls into its store, in the
 * image's first-access order and every chunk verified, before the function serves.
 */
public final class FunctionOptions {

  public static final int DEFAULT_MIN_INSTANCES = 0;
  public static final int DEFAULT_MAX_INSTANCES = 1;
  public static final Duration DEFAULT_KEEP_ALIVE = Duration.ofMinutes(5);
  public static final int DEFAULT_QUEUE_CAPACITY = 64;
  /** Instances of one function, at most: each holds its image's device memory. */
  public static final int MAX_INSTANCES_LIMIT = 64;
  public static final int MAX_QUEUE_CAPACITY = 100_000;

  private static final Set<String> FIELDS = Set.of("image", "minInstances", "maxInstances", "keepAlive",
      "queueCapacity");

  private String image;
  private int minInstances = DEFAULT_MIN_INSTANCES;
  private int maxInstances = DEFAULT_MAX_INSTANCES;
  private Duration keepAlive = DEFAULT_KEEP_ALIVE;
  private int queueCapacity = DEFAULT_QUEUE_CAPACITY;

  public FunctionOptions() {}

  public FunctionOptions(FunctionOptions o) {
    this.image = o.image;
    this.minInstances = o.minInstances;
    this.maxInstances = o.maxInstances;
    this.keepAlive = o.keepAlive;
    this.queueCapacity = o.queueCapacity;
  }

  /** The image's tag in the store, or the registry reference it is pulled from. */
  public String image() {
    return image;
  }

  public FunctionOptions setImage(String tag) {
    if (tag == null || tag.isBlank()) {
      throw new IllegalArgumentException("a function needs an image tag or registry reference");
    }
    this.image = tag;
    return this;
  }

  public int minInstances() {
    return minInstances;
  }

  /** Instances kept even when idle (started at registration); 0 lets the function scale to zero. */
  public FunctionOptions setMinInstances(int n) {
    this.minInstances = checkRange("minInstances", n, 0, MAX_INSTANCES_LIMIT);
    return this;
  }

  public int maxInstances() {
    return maxInstances;
  }

  /** Instances at most, each serving one request at a time; 1 to {@value #MAX_INSTANCES_LIMIT}. */
  public FunctionOptions setMaxInstances(int n) {
    this.maxInstances = checkRange("maxInstances", n, 1, MAX_INSTANCES_LIMIT);
    return this;
  }

  public Duration keepAlive() {
    return keepAlive;
  }

  /** How long an idle instance above {@link #minInstances()} is kept before it is evicted. */
  public FunctionOptions setKeepAlive(Duration d) {
    if (d == null || d.isNegative()) {
      throw new IllegalArgumentException("keepAlive must be zero or positive, not " + d);
    }
    this.keepAlive = d;
    return this;
  }

  public int queueCapacity() {
    return queueCapacity;
  }

  /** Requests that may wait for an instance; one more is refused with 429. */
  public FunctionOptions setQueueCapacity(int n) {
    this.queueCapacity = checkRange("queueCapacity", n, 0, MAX_QUEUE_CAPACITY);
    return this;
  }

  /** Checks the options as a whole: an image, and no more instances kept than allowed. */
  public FunctionOptions validate() {
    if (image == null) {
      throw new IllegalArgumentException("a function needs an image tag or registry reference ('image')");
    }
    if (minInstances > maxInstances) {
      throw new IllegalArgumentException("minInstances (" + minInstances + ") exceeds maxInstances (" + maxInstances
          + ")");
    }
    return this;
  }

  public ObjectNode toJson() {
    ObjectNode json = JsonNodeFactory.instance.objectNode();
    json.put("image", image);
    json.put("minInstances", minInstances);
    json.put("maxInstances", maxInstances);
    json.put("keepAlive", keepAlive.toMillis() % 1000 == 0 ? keepAlive.toSeconds() + "s" : keepAlive.toMillis() + "ms");
    json.put("queueCapacity", queueCapacity);
    return json;
  }

  /**
   * Options from their JSON form; absent fields keep their defaults.
   *
   * @throws IllegalArgumentException naming the first field that is unknown or wrong
   */
  public static FunctionOptions fromJson(JsonNode json) {
    if (json == null || !json.isObject()) {
      throw new IllegalArgumentException("function options are a JSON object");
    }
    for (Iterator<String> it = json.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!FIELDS.contains(f)) {
        throw new IllegalArgumentException("unknown field '" + f + "'; known: " + FIELDS);
      }
    }
    FunctionOptions o = new FunctionOptions();
    if (json.has("image")) {
      if (!json.get("image").isTextual()) {
        throw new IllegalArgumentException("'image' is an image tag or a registry reference, a string");
      }
      o.setImage(json.get("image").asText());
    }
    if (json.has("minInstances")) {
      o.setMinInstances(intField(json, "minInstances"));
    }
    if (json.has("maxInstances")) {
      o.setMaxInstances(intField(json, "maxInstances"));
    }
    if (json.has("keepAlive")) {
      o.setKeepAlive(ServerOptions.duration(json.get("keepAlive"), "keepAlive"));
    }
    if (json.has("queueCapacity")) {
      o.setQueueCapacity(intField(json, "queueCapacity"));
    }
    return o;
  }

  static int intField(JsonNode json, String field) {
    JsonNode v = json.get(field);
    if (!v.canConvertToInt() || !v.isIntegralNumber()) {
      throw new IllegalArgumentException("'" + field + "' is an integer, not " + v);
    }
    return v.intValue();
  }

  static int checkRange(String field, int n, int min, int max) {
    if (n < min || n > max) {
      throw new IllegalArgumentException(field + " must be " + min + " to " + max + ", not " + n);
    }
    return n;
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
