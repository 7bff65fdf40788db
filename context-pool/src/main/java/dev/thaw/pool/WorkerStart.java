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
 *     {@code warmup} (launch and JSON paths), {@code warmupImage} (when configured); absent phases did not run
 * @param spawnToReadyMillis from the parent starting the process to reading READY
 */
public record WorkerStart(long pid, String driver, boolean simulated, String deviceName, Map<String, Double> phases,
    double spawnToReadyMillis) {}
