package dev.thaw.pool.worker;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
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
 */
public record WorkerConfig(String device, int ordinal, String storePath, int warmupLaunches, String warmupImage,
    String hostCache, int maxFrameBytes, long parentPid, long spawnNanos, boolean warmupAfterReady,
    List<String> prepareAtStart) {

  private static final ObjectMapper JSON = new ObjectMapper();

  public WorkerConfig {
    prepareAtStart = prepareAtStart == null ? List.of() : List.copyOf(prepareAtStart);
  }

  /** A worker that says READY only once warm. */
  public WorkerConfig(String device, int ordinal, String storePath, int warmupLaunches, String warmupImage,
      String hostCache, int maxFrameBytes, long parentPid, long spawnNanos) {
    this(device, ordinal, storePath, warmupLaunches, warmupImage, hostCache, maxFrameBytes, parentPid, spawnNanos,
        false, List.of());
  }

  public String toJson() {
    try {
      return JSON.writeValueAsString(this);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  public static WorkerConfig fromJson(String json) {
    try {
      return JSON.readValue(json, WorkerConfig.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("worker config: " + e.getOriginalMessage(), e);
    }
  }
}
