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
  public static final Layout DEFAULT_LAYOUT = Layout.RUNS;

  /**
   * How an image's chunks are laid out in the arena. A restore copies, in one call, bytes that lie back to back both
   * in the arena and on the device; a copy costs ~2.5 µs on top of its bytes (PCIe from registered memory: 35 GB/s
   * for 256 KiB copies, 53 GB/s from 4 MiB), so the layout decides how many calls an image takes.
   */
  public enum Layout {
    /**
     * Each distinct chunk once in the whole arena: a chunk an image uses in several places (zeroed biases, layer
     * norms set to one, another image's weights) lies in one place, and every use of it that is not there breaks the
     * image's copy runs in two. Least memory.
     */
    SHARED,
    /**
     * Each image laid out as its restore copies it: every use of a chunk in its place in the image's runs, so a packed
     * image is a few long copies. A use is held again in the image's own extent (copied there from its verified
     * place, not read again) unless it belongs to a run of at least {@link #SHARED_RUN_BYTES} that lies back to back
     * elsewhere in the arena already (another image's identical weights): those are shared. Costs the repeated bytes
     * of short runs once more (GPT-2-large seeded: 1.2 MB of 1.56 GB).
     */
    RUNS;

    /** A run of uses shorter than this found elsewhere in the arena is held again: copies this long run at 53 GB/s. */
    public static final long SHARED_RUN_BYTES = 4L << 20;
  }

  private long capacityBytes = DEFAULT_CAPACITY_BYTES;
  private Path directory;
  private int stagingThreads = DEFAULT_STAGING_THREADS;
  private Layout layout = DEFAULT_LAYOUT;

  public long capacityBytes() {
    return capacityBytes;
  }

  /** The arena's size: shared memory, counted against the host's RAM (tmpfs) once pages are written. */
  public HostCacheOptions capacityBytes(long bytes) {
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
  public HostCacheOptions directory(Path directory) {
    this.directory = directory;
    return this;
  }

  public int stagingThreads() {
    return stagingThreads;
  }

  /** Threads reading and verifying chunks from the store into the arena. */
  public HostCacheOptions stagingThreads(int threads) {
    if (threads < 1) {
      throw new IllegalArgumentException("staging needs at least one thread, not " + threads);
    }
    this.stagingThreads = threads;
    return this;
  }

  public Layout layout() {
    return layout;
  }

  /** How images are laid out in the arena: {@link Layout#RUNS} (the default) or {@link Layout#SHARED}. */
  public HostCacheOptions layout(Layout layout) {
    this.layout = java.util.Objects.requireNonNull(layout);
    return this;
  }

  public JsonNode toJson() {
    ObjectNode o = JsonNodeFactory.instance.objectNode();
    o.put("capacityBytes", capacityBytes);
    if (directory != null) {
      o.put("directory", directory.toString());
    }
    o.put("stagingThreads", stagingThreads);
    o.put("layout", layout.name().toLowerCase(java.util.Locale.ROOT));
    return o;
  }

  /** Reads {@link #toJson()}'s form; absent fields keep their defaults. */
  public static HostCacheOptions fromJson(JsonNode json) {
    HostCacheOptions o = new HostCacheOptions();
    if (json.has("capacityBytes")) {
      o.capacityBytes(json.get("capacityBytes").asLong());
    }
    if (json.hasNonNull("directory")) {
      o.directory(Path.of(json.get("directory").asText()));
    }
    if (json.has("stagingThreads")) {
      o.stagingThreads(json.get("stagingThreads").asInt());
    }
    if (json.hasNonNull("layout")) {
      o.layout(layout(json.get("layout").asText()));
    }
    return o;
  }

  /**
   * The layout named {@code name} ({@code runs} or {@code shared}, any case).
   *
   * @throws IllegalArgumentException naming the layouts there are
   */
  public static Layout layout(String name) {
    for (Layout l : Layout.values()) {
      if (l.name().equalsIgnoreCase(name)) {
        return l;
      }
    }
    throw new IllegalArgumentException("unknown host cache layout '" + name + "': runs or shared");
  }
}
