package dev.thaw.image.build;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.staging.Staging;
import dev.thaw.image.StrictJson;
import dev.thaw.image.store.Tags;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * What to build and how: the function, its config, the tag, sample requests, and the snapshot pipeline's
 * staging and hashing resources. Setters check their argument and are fluent; {@link #toJson()} and
 * {@link #fromJson} are the JSON form.
 */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class BuildOptions {

  /** Staging buffers: one the copy engine fills while the others are hashed and stored. */
  public static final int DEFAULT_STAGING_BUFFERS = Staging.DEFAULT_BUFFERS;
  /** Bytes of each pinned staging buffer; also the segment size chunks never span. */
  public static final long DEFAULT_STAGING_BYTES = Staging.DEFAULT_BYTES;
  public static final int DEFAULT_HASH_THREADS = Staging.DEFAULT_THREADS;

  // Until the store's own tag rule is merged: OCI-reference-like, no spaces, no leading punctuation.
  private static final ObjectMapper JSON = new ObjectMapper();

  @JsonProperty private String functionClass;
  @JsonProperty private JsonNode config = JsonNodeFactory.instance.objectNode();
  @JsonProperty private String tag;
  @JsonProperty private List<JsonNode> sampleRequests = new ArrayList<>();
  @JsonProperty private int stagingBuffers = DEFAULT_STAGING_BUFFERS;
  @JsonProperty private long stagingBytes = DEFAULT_STAGING_BYTES;
  @JsonProperty private int hashThreads = DEFAULT_HASH_THREADS;

  public String functionClass() {
    return functionClass;
  }

  public BuildOptions setFunctionClass(String className) {
    if (className == null || className.isBlank()) {
      throw new IllegalArgumentException("a function class name is needed");
    }
    this.functionClass = className.strip();
    return this;
  }

  public JsonNode config() {
    return config;
  }

  /** The config {@code init} gets; a JSON object. */
  public BuildOptions setConfig(JsonNode config) {
    if (config == null || !config.isObject()) {
      throw new IllegalArgumentException("the function config must be a JSON object, not "
          + (config == null ? "null" : config.getNodeType().toString().toLowerCase(Locale.ROOT)));
    }
    this.config = config.deepCopy();
    return this;
  }

  /**
   * Parses the config from inline JSON, or from a file when {@code value} names one.
   *
   * @throws IllegalArgumentException if it is neither a readable file nor a JSON object
   */
  public BuildOptions setConfig(String value) {
    if (value.strip().startsWith("{")) {
      try {
        return setConfig(StrictJson.read(value));
      } catch (JsonProcessingException e) {
        throw new IllegalArgumentException("the config is not JSON: " + StrictJson.problem(e), e);
      }
    }
    Path file;
    String text;
    try {
      file = Path.of(value);
      text = Files.readString(file);
    } catch (InvalidPathException | NoSuchFileException e) {
      throw new IllegalArgumentException("config file " + value + " does not exist (give the config as a JSON"
          + " object inline, or the path of a file that holds one)", e);
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot read config file " + value + ": "
          + (e.getMessage() == null ? "I/O error" : e.getMessage()), e);
    }
    try {
      return setConfig(StrictJson.read(text));
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("config file " + file + " is not JSON: " + StrictJson.problem(e), e);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("config file " + file + ": " + e.getMessage(), e);
    }
  }

  public String tag() {
    return tag;
  }

  /** @throws IllegalArgumentException if it is not a tag */
  public BuildOptions setTag(String tag) {
    checkTag(tag);
    this.tag = tag;
    return this;
  }

  /** @throws IllegalArgumentException unless {@code tag} follows {@link Tags#RULE}. */
  public static void checkTag(String tag) {
    Tags.check(tag);
  }

  public List<JsonNode> sampleRequests() {
    return List.copyOf(sampleRequests);
  }

  /** Adds a request to run after {@code init}, as a profiling invocation; its JSON body. */
  public BuildOptions addSampleRequest(JsonNode request) {
    if (request == null || !request.isObject()) {
      throw new IllegalArgumentException("a sample request must be a JSON object");
    }
    sampleRequests.add(request.deepCopy());
    return this;
  }

  /** @throws IllegalArgumentException if the file cannot be read or is not a JSON object, naming it */
  public BuildOptions addSampleRequest(Path file) {
    JsonNode node;
    try {
      node = StrictJson.read(Files.readString(file));
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("sample request " + file + " is not JSON: " + StrictJson.problem(e), e);
    } catch (NoSuchFileException e) {
      throw new IllegalArgumentException("cannot read sample request " + file + ": no such file", e);
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot read sample request " + file + ": " + e.getMessage(), e);
    }
    if (node == null || !node.isObject()) {
      throw new IllegalArgumentException("sample request " + file + " is not a JSON object");
    }
    return addSampleRequest(node);
  }

  public int stagingBuffers() {
    return stagingBuffers;
  }

  /** Pinned staging buffers in the snapshot pipeline, 2 or more (double, triple buffering). */
  public BuildOptions setStagingBuffers(int count) {
    this.stagingBuffers = Staging.checkBuffers(count);
    return this;
  }

  public long stagingBytes() {
    return stagingBytes;
  }

  /** Bytes of each staging buffer: 4 KiB to 1 GiB. */
  public BuildOptions setStagingBytes(long bytes) {
    this.stagingBytes = Staging.checkBytes(bytes);
    return this;
  }

  public int hashThreads() {
    return hashThreads;
  }

  /** Threads that cut, hash and store chunks. */
  public BuildOptions setHashThreads(int threads) {
    this.hashThreads = Staging.checkThreads(threads, "hash");
    return this;
  }

  /** Checks that what a build needs is set. */
  void checkComplete() {
    if (functionClass == null) {
      throw new IllegalArgumentException("a function class name is needed");
    }
    checkTag(tag);
  }

  public JsonNode toJson() {
    return JSON.valueToTree(this);
  }

  /** Reads options written by {@link #toJson()}, each value checked by its setter. */
  public static BuildOptions fromJson(JsonNode json) {
    BuildOptions o;
    try {
      o = JSON.treeToValue(json, BuildOptions.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("build options: " + e.getOriginalMessage(), e);
    }
    BuildOptions checked = new BuildOptions().setConfig(o.config).setStagingBuffers(o.stagingBuffers)
        .setStagingBytes(o.stagingBytes).setHashThreads(o.hashThreads);
    if (o.functionClass != null) {
      checked.setFunctionClass(o.functionClass);
    }
    if (o.tag != null) {
      checked.setTag(o.tag);
    }
    o.sampleRequests.forEach(checked::addSampleRequest);
    return checked;
  }
}
