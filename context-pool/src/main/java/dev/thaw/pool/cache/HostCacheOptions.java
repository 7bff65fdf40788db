package dev.thaw.pool.cache;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;

/** How big the host image cache is, where its arena lives, and how it stages chunks. */
public final class HostCacheOptions {

  public static final long DEFAULT_CAPACITY_BYTES = 4L << 30;
  public static final int DEFAULT_STAGING_THREADS = Math.max(1, Math.min(8, Runtime.getRuntime().availableProcessors()));
  /** Extents start at page boundaries, so a copy out of one starts aligned. */
  public static final int ALIGNMENT = 4096;

  private long capacityBytes = DEFAULT_CAPACITY_BYTES;
  private Path directory;
  private int stagingThreads = DEFAULT_STAGING_THREADS;

  public long capacityBytes() {
    return capacityBytes;
  }

  /** The arena's size: shared memory, counted against the host's RAM (tmpfs) once pages are written. */
  public HostCacheOptions setCapacityBytes(long bytes) {
    if (bytes < ALIGNMENT) {
      throw new IllegalArgumentException("the host cache needs at least " + ALIGNMENT + " bytes, not " + bytes);
    }
    this.capacityBytes = bytes;
    return this;
  }

  public Path directory() {
    return directory;
  }

  /**
   * Where the arena's file is made (a tmpfs such as {@code /dev/shm}), or null (the default) for an anonymous
   * {@code memfd} that workers open as {@code /proc/<server pid>/fd/<n>}: it vanishes with the last process
   * that maps it, so a killed server leaves nothing behind. A named file outlives a killed server.
   */
  public HostCacheOptions setDirectory(Path directory) {
    this.directory = directory;
    return this;
  }

  public int stagingThreads() {
    return stagingThreads;
  }

  /** Threads reading and verifying chunks from the store into the arena. */
  public HostCacheOptions setStagingThreads(int threads) {
    if (threads < 1) {
      throw new IllegalArgumentException("staging needs at least one thread, not " + threads);
    }
    this.stagingThreads = threads;
    return this;
  }

  public JsonNode toJson() {
    ObjectNode o = JsonNodeFactory.instance.objectNode();
    o.put("capacityBytes", capacityBytes);
    if (directory != null) {
      o.put("directory", directory.toString());
    }
    o.put("stagingThreads", stagingThreads);
    return o;
  }

  /** Reads {@link #toJson()}'s form; absent fields keep their defaults. */
  public static HostCacheOptions fromJson(JsonNode json) {
    HostCacheOptions o = new HostCacheOptions();
    if (json.has("capacityBytes")) {
      o.setCapacityBytes(json.get("capacityBytes").asLong());
    }
    if (json.hasNonNull("directory")) {
      o.setDirectory(Path.of(json.get("directory").asText()));
    }
    if (json.has("stagingThreads")) {
      o.setStagingThreads(json.get("stagingThreads").asInt());
    }
    return o;
  }
}
