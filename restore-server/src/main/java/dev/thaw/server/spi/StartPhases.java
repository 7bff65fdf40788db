package dev.thaw.server.spi;

/**
 * Where a cold start spent its time, in milliseconds, in the phases the server reports in {@code Server-Timing}.
 *
 * @param acquireMillis getting a context (a fresh one, or a preinitialized one from the pool)
 * @param mapMillis reading the manifest, mapping the image's allocations at their addresses, loading its modules
 * @param restoreMillis waiting for the image's bytes: the whole copy for a full restore, only the part the first
 *     request waits on for an on-demand one
 * @param restoredBytes device bytes restored before the instance served
 * @param tier the way the bytes came in: {@code store}, {@code host-cache}, {@code host-cache-multilink} (through
 *     other devices' links as well), {@code hbm}, {@code hbm-peer} (from another device's HBM tier)
 */
public record StartPhases(double acquireMillis, double mapMillis, double restoreMillis, long restoredBytes,
    String tier) {

  public double totalMillis() {
    return acquireMillis + mapMillis + restoreMillis;
  }
}
