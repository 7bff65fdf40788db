package dev.thaw.pool;

/**
 * A snapshot of one device's workers.
 *
 * @param device the device ordinal
 * @param idle warm and waiting to be acquired
 * @param starting spawned, not yet ready
 * @param inUse handed out and not yet released
 * @param preparing PREPAREs sent to this device's workers and not yet answered: a cold start now may wait for one
 * @param started workers that reached READY since the pool opened
 * @param failedStarts workers that died or timed out before READY
 * @param lost handed-out workers that crashed, hung or were evicted
 * @param recycled times a released worker dropped its image and went back to the idle set blank
 * @param lastFailure the last start failure or loss, or null
 */
public record PoolStats(int device, int idle, int starting, int inUse, int preparing, long started,
    long failedStarts, long lost, long recycled, String lastFailure) {

  /** Workers alive: idle, starting and in use. */
  public int live() {
    return idle + starting + inUse;
  }
}
