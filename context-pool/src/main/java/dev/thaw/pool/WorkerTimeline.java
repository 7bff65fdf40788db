package dev.thaw.pool;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A worker's restore timeline, placed on the parent's clock.
 *
 * <p>The worker stamps its trace with its own {@link System#nanoTime()}. On Linux that is {@code CLOCK_MONOTONIC},
 * one clock for every process of a boot (within one time namespace), so the worker's stamps are the parent's: the
 * parent checks it on each answer (the worker's "now" must fall between the request's send and the answer's arrival)
 * and only where it does not (another clock, another time namespace) shifts the trace by the round trip's midpoint,
 * {@code errorMicros} either way.
 *
 * @param chromeTrace {@code {"traceEvents": [...]}}, timestamps in microseconds from {@code originNanos}: a row
 *     for the BECOME's phases, then the restore's rows (host, restore stream: copies, compute stream: kernels)
 * @param originNanos when the BECOME began in the worker, on the parent's {@link System#nanoTime()} clock
 * @param sharedClock true when the worker's clock was found to be the parent's
 * @param errorMicros how far the placement may be off: 0 on a shared clock, else half the round trip
 */
public record WorkerTimeline(JsonNode chromeTrace, long originNanos, boolean sharedClock, double errorMicros) {}
