package dev.thaw.pool;

import java.util.List;
import java.util.Map;

/**
 * A worker became an image.
 *
 * @param image the name it was given
 * @param phases milliseconds inside the worker, in order: {@code manifest} (parse), {@code store} (catch the
 *     store up), then the restore's phases ({@code open manifest}, {@code map allocations}, {@code load modules},
 *     {@code copy + verify}, {@code rebuild state}) and {@code total}
 * @param bytes device bytes restored
 * @param notes what differed from the build device and what the restore did about it
 * @param roundTripMillis from sending BECOME to reading its answer, in the parent
 */
public record BecomeResult(String image, Map<String, Double> phases, long bytes, List<String> notes,
    double roundTripMillis) {}
