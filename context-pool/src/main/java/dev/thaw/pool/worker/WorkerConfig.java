package dev.thaw.pool.worker;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.pool.ContextPoolOptions;
import java.util.List;

/**
 * What a worker is told on its command line (one JSON argument): its device, what to open and warm, and whom
 * to watch.
 *
 * @param device {@code cuda}, {@code sim} or {@code auto}; null for {@code THAW_DEVICE}'s choice
 * @param ordinal the device ordinal
 * @param storePath the store to open read-only at start, or null
 * @param warmupLaunches kernel launches of the warm-up (0 for none)
 * @param warmupImage a tag in the store whose image is restored, invoked with its sample requests and dropped
 *     at start, or null
 * @param hostCache the host image cache's arena to map read-only and register at start, or null
 * @param maxFrameBytes the largest frame body accepted
 * @param parentPid the parent's process id: the worker exits when it is gone
 * @param spawnNanos the parent's {@link System#nanoTime()} at spawn (one monotonic clock per Linux host), so
 *     the worker can say how long its JVM took to start
 * @param warmupAfterReady say READY as soon as the worker can serve and warm up after it, until a request comes
 *     (then a second READY, {@code warm}, when the warm-up ran to its end); false: READY only once warm
 * @param prepareAtStart tags in the store to prepare before READY, which names their keys (null: none)
 * @param protectAfterIdleMillis how long the worker is idle after an answer before it write-protects its image's
 *     read-only slabs; 0: at once, before the next request runs
 * @param helperLinks how many other devices (the lowest ordinals the driver lists) the worker, if it maps a host
 *     cache, opens a {@code HelperLink} to after READY; 0 for none
 * @param helperSlotBytes the bytes of each slot of a helper link's ring
 * @param helperMinFreeBytes a helper device with less free memory than this (besides the ring) is not used
 */
public record WorkerConfig(String device, int ordinal, String storePath, int warmupLaunches, String warmupImage,
    String hostCache, int maxFrameBytes, long parentPid, long spawnNanos, boolean warmupAfterReady,
    List<String> prepareAtStart, long protectAfterIdleMillis, int helperLinks, long helperSlotBytes,
    long helperMinFreeBytes) {

  /** Only the worker reads the JSON form: the parent writes it without loading Jackson. */
  private static final class Json {
    static final ObjectMapper MAPPER = new ObjectMapper();
  }

  public WorkerConfig {
    prepareAtStart = prepareAtStart == null ? List.of() : List.copyOf(prepareAtStart);
  }

  /** A worker that says READY only once warm. */
  public WorkerConfig(String device, int ordinal, String storePath, int warmupLaunches, String warmupImage,
      String hostCache, int maxFrameBytes, long parentPid, long spawnNanos) {
    this(device, ordinal, storePath, warmupLaunches, warmupImage, hostCache, maxFrameBytes, parentPid, spawnNanos,
        false, List.of(), ContextPoolOptions.DEFAULT_PROTECT_AFTER_IDLE_MILLIS, ContextPoolOptions.DEFAULT_HELPER_LINKS,
        HelperLink.DEFAULT_SLOT_BYTES, HelperLink.DEFAULT_MIN_FREE_BYTES);
  }

  /**
   * The JSON form {@link #fromJson} reads, written by hand: the parent spawns its first worker before anything else
   * in it has loaded Jackson, whose first use would sit on the way to a scale-from-zero's first worker.
   */
  public String toJson() {
    StringBuilder b = new StringBuilder(256).append('{');
    field(b, "device", device).append(',');
    b.append("\"ordinal\":").append(ordinal).append(',');
    field(b, "storePath", storePath).append(',');
    b.append("\"warmupLaunches\":").append(warmupLaunches).append(',');
    field(b, "warmupImage", warmupImage).append(',');
    field(b, "hostCache", hostCache).append(',');
    b.append("\"maxFrameBytes\":").append(maxFrameBytes).append(',');
    b.append("\"parentPid\":").append(parentPid).append(',');
    b.append("\"spawnNanos\":").append(spawnNanos).append(',');
    b.append("\"warmupAfterReady\":").append(warmupAfterReady).append(',');
    b.append("\"protectAfterIdleMillis\":").append(protectAfterIdleMillis).append(',');
    b.append("\"helperLinks\":").append(helperLinks).append(',');
    b.append("\"helperSlotBytes\":").append(helperSlotBytes).append(',');
    b.append("\"helperMinFreeBytes\":").append(helperMinFreeBytes).append(',');
    b.append("\"prepareAtStart\":[");
    for (int i = 0; i < prepareAtStart.size(); i++) {
      string(b.append(i == 0 ? "" : ","), prepareAtStart.get(i));
    }
    return b.append("]}").toString();
  }

  private static StringBuilder field(StringBuilder b, String name, String value) {
    b.append('"').append(name).append("\":");
    return value == null ? b.append("null") : string(b, value);
  }

  /** {@code s} as a JSON string: quotes, backslashes and control characters escaped. */
  private static StringBuilder string(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"');
  }

  public static WorkerConfig fromJson(String json) {
    try {
      return Json.MAPPER.readValue(json, WorkerConfig.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("worker config: " + e.getOriginalMessage(), e);
    }
  }
}
