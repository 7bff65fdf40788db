package dev.thaw.pool;

import java.util.Map;

/**
 * How a worker's start went.
 *
 * @param pid its process id
 * @param driver {@code cuda} or {@code sim}
 * @param simulated true on the simulated device: none of these times is a GPU time
 * @param deviceName the device's name
 * @param phases milliseconds of each start-up phase, in order: {@code jvm} (spawn to {@code main}), {@code
 *     driver} (open it: {@code cuInit}), {@code context}, {@code streams}, {@code store} (opened read-only),
 *     {@code warmup} (the launch path, and waiting for the CPU warm-up), {@code warmupImage} (when configured);
 *     absent phases did not run. {@code store} and {@code cpuWarmup} (Jackson and the manifest parser) run on a
 *     thread of their own beside {@code driver} and {@code context}; {@code storeWait} is what the start waited for
 *     the store after them. A worker that warms up after READY says READY without {@code warmup}, then again with
 *     it once its warm-up ran to its end
 * @param spawnToReadyMillis from the parent starting the process to reading READY
 * @param readyNanos when the parent read READY, on its {@link System#nanoTime()} clock (0: not known)
 */
public record WorkerStart(long pid, String driver, boolean simulated, String deviceName, Map<String, Double> phases,
    double spawnToReadyMillis, long readyNanos) {

  public WorkerStart(long pid, String driver, boolean simulated, String deviceName, Map<String, Double> phases,
      double spawnToReadyMillis) {
    this(pid, driver, simulated, deviceName, phases, spawnToReadyMillis, 0);
  }
}
