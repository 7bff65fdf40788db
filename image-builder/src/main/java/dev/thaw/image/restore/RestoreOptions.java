package dev.thaw.image.restore;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.staging.Staging;

/** The full restore's pipeline resources. Setters check and are fluent; {@link #toJson()} is the JSON form. */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class RestoreOptions {

  public static final int DEFAULT_STAGING_BUFFERS = Staging.DEFAULT_BUFFERS;
  public static final long DEFAULT_STAGING_BYTES = Staging.DEFAULT_BYTES;
  public static final int DEFAULT_READ_THREADS = Staging.DEFAULT_THREADS;

  private static final ObjectMapper JSON = new ObjectMapper();

  @JsonProperty private int stagingBuffers = DEFAULT_STAGING_BUFFERS;
  @JsonProperty private long stagingBytes = DEFAULT_STAGING_BYTES;
  @JsonProperty private int readThreads = DEFAULT_READ_THREADS;

  public int stagingBuffers() {
    return stagingBuffers;
  }

  /** Pinned staging buffers: one being copied to the device while the others are read and verified. 2 to 64. */
  public RestoreOptions setStagingBuffers(int count) {
    this.stagingBuffers = Staging.checkBuffers(count);
    return this;
  }

  public long stagingBytes() {
    return stagingBytes;
  }

  /** Bytes of each staging buffer, 4 KiB to 1 GiB; raised to the image's largest chunk when smaller. */
  public RestoreOptions setStagingBytes(long bytes) {
    this.stagingBytes = Staging.checkBytes(bytes);
    return this;
  }

  public int readThreads() {
    return readThreads;
  }

  /** Threads that read chunks from the store and verify their digests. */
  public RestoreOptions setReadThreads(int threads) {
    this.readThreads = Staging.checkThreads(threads, "read");
    return this;
  }

  public JsonNode toJson() {
    return JSON.valueToTree(this);
  }

  public static RestoreOptions fromJson(JsonNode json) {
    try {
      RestoreOptions o = JSON.treeToValue(json, RestoreOptions.class);
      return new RestoreOptions().setStagingBuffers(o.stagingBuffers).setStagingBytes(o.stagingBytes)
          .setReadThreads(o.readThreads);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("restore options: " + e.getOriginalMessage(), e);
    }
  }
}
