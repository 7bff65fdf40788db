package dev.thaw.pool;

/**
 * What a worker says it is doing.
 *
 * @param pid its process id
 * @param state {@code BLANK} (warm, no image), {@code BECOMING}, {@code READY} (an image, idle), {@code INVOKING}
 * @param image the image it became, or null
 * @param invocations requests served
 */
public record WorkerStatus(long pid, String state, String image, long invocations) {}
