package dev.thaw.image.restore;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/** The full restore's pipeline resources. Setters check and are fluent; {@link #toJson()} is the JSON form. */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class RestoreOptions {

  public static final int DEFAULT_STAGING_BUFFERS = 6;
  public static final long DEFAULT_STAGING_BYTES = 64L << 20;
  public static final int DEFAULT_READ_THREADS = Math.max(1, Math.min(16, Runtime.getRuntime().availableProcessors()));

  private static final ObjectMapper JSON = new ObjectMapper();

  @JsonProperty private int stagingBuffers = DEFAULT_STAGING_BUFFERS;
  @JsonProperty private long stagingBytes = DEFAULT_STAGING_BYTES;
  @JsonProperty private int readThreads = DEFAULT_READ_THREADS;

  public int stagingBuffers() {
    return stagingBuffers;
  }

  /** Pinned staging buffers: one being copied to the device while the others are read and verified. 2 to 64. */
  public RestoreOptions stagingBuffers(int count) {
    if (count < 2 || count > 64) {
      throw new IllegalArgumentException("staging buffers must be 2 to 64, not " + count);
    }
    this.stagingBuffers = count;
    return this;
  }

  public long stagingBytes() {
    return stagingBytes;
  }

  /** Bytes of each staging buffer, 4 KiB to 1 GiB; raised to the image's largest chunk when smaller. */
  public RestoreOptions stagingBytes(long bytes) {
    if (bytes < 4096 || bytes > (1L << 30)) {
      throw new IllegalArgumentException("a staging buffer must be 4 KiB to 1 GiB, not " + bytes + " bytes");
    }
    this.stagingBytes = bytes;
    return this;
  }

  public int readThreads() {
    return readThreads;
  }

  /** Threads that read chunks from the store and verify their digests. */
  public RestoreOptions readThreads(int threads) {
    if (threads < 1 || threads > 256) {
      throw new IllegalArgumentException("read threads must be 1 to 256, not " + threads);
    }
    this.readThreads = threads;
    return this;
  }

  public JsonNode toJson() {
    return JSON.valueToTree(this);
  }

  public static RestoreOptions fromJson(JsonNode json) {
    try {
      RestoreOptions o = JSON.treeToValue(json, RestoreOptions.class);
      return new RestoreOptions().stagingBuffers(o.stagingBuffers).stagingBytes(o.stagingBytes)
          .readThreads(o.readThreads);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("restore options: " + e.getOriginalMessage(), e);
    }
  }
}
