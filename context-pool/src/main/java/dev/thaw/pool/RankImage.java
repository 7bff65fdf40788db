package dev.thaw.pool;

/**
 * One rank of a group a worker becomes ({@link Worker#becomeGroup}): its image's tag and manifest as stored, the device
 * it goes to, and where its bytes come from (its own host-cache lease, read through that device's link).
 */
public record RankImage(String tag, byte[] manifest, int device, ImageSource source) {}
