package dev.thaw.pool;

/**
 * A worker's restore is complete: every byte of its image is on the device (an on-demand restore finishes after
 * the BECOME answered, a full one before).
 *
 * @param sinceBecomeMillis from the worker starting the BECOME to the last copy landing (by device events)
 * @param bytes device bytes of the image
 * @param hostBytes bytes copied from the host image cache
 * @param storeBytes bytes read from the store, verified and copied
 * @param residentBytes bytes that were on the device already (the HBM tier)
 * @param copies host → device copies
 * @param promotions allocations a launch moved to the head of the restore
 * @param waits device-side waits of launches for bytes not yet resident
 * @param peerBytes bytes pulled over the peer link from another device's HBM tier
 * @param helperBytes of {@code hostBytes}, those that came through other devices' links (multi-link restore)
 */
public record RestoreCompletion(double sinceBecomeMillis, long bytes, long hostBytes, long storeBytes,
    long residentBytes, int copies, int promotions, long waits, long peerBytes, long helperBytes) {}
