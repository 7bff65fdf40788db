package dev.thaw.pool;

import java.util.List;
import java.util.Map;

/**
 * A worker became an image.
 *
 * @param image the name it was given
 * @param source where the bytes came from: {@code hbm} (read-only slabs mapped from the HBM tier, the rest from
 *     the host cache), {@code hbm-peer} (read-only slabs pulled from another device's HBM tier over the peer link,
 *     the rest from the host cache), {@code cache}, {@code store}
 * @param helpers the devices whose links the restore was lent besides the worker's own (of those the source named),
 *     in order; empty when it restores through its own link alone
 * @param phases milliseconds inside the worker, disjoint and in order (they add up to {@code total}, which is
 *     the last entry): {@code queued} (read off stdin to taken up: work before it, or the warm-up reaching a point
 *     to stop at), {@code manifest} (parse, or {@code prepared} when named), {@code placement} (host cache source only), {@code hbm take} (HBM-tier descriptors taken; with the
 *     tier only), {@code peer take} (another device's tier's slabs taken and mapped), {@code store} (use or
 *     open the store), {@code load modules}, {@code map allocations}, {@code rebuild state}, {@code start restore}
 *     (the rest of the restore call), {@code resident} (waiting for every byte, only with
 *     {@link ContextPoolOptions#awaitResident()}); the function is invocable at the end of them
 * @param bytes device bytes restored
 * @param roundTripMillis from the claim of the worker to reading the BECOME's answer, in the parent
 * @param prepareWaitMillis of that, the wait for the image's PREPARE to be answered before the BECOME was sent (the
 *     worker would run it first anyway); 0 when none was running
 * @param answerMillis from the end of the worker's {@code total} to this process reading its answer (both clocks
 *     {@code CLOCK_MONOTONIC}, one host); NaN when the worker did not say
 * @param answerSendMillis of that, the worker's part: building and writing its answer
 */
public record BecomeResult(String image, String source, List<Integer> helpers, Map<String, Double> phases,
    long bytes, double roundTripMillis, double prepareWaitMillis, double answerMillis, double answerSendMillis) {

  public BecomeResult {
    helpers = List.copyOf(helpers);
  }
}
