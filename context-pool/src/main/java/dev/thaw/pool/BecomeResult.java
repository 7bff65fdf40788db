package dev.thaw.pool;

import java.util.Map;

/**
 * A worker became an image.
 *
 * @param image the name it was given
 * @param source where the bytes came from: {@code cache}, {@code store}, or {@code store (…why)} when a host
 *     cache source fell back
 * @param phases milliseconds inside the worker, in order: {@code manifest} (parse); from the host cache {@code
 *     placement}, {@code map + modules}, {@code copy} (with {@code copies} and {@code copyGBps}, not times);
 *     from the store {@code store} (open it if needed) then the full restore's {@code open manifest}, {@code map
 *     allocations}, {@code load modules}, {@code copy + verify}; then {@code rebuild state} and {@code total}
 * @param bytes device bytes restored
 * @param roundTripMillis from sending BECOME to reading its answer, in the parent
 */
public record BecomeResult(String image, String source, Map<String, Double> phases, long bytes,
    double roundTripMillis) {}
