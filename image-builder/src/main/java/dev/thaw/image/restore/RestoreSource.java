package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.List;

/**
 * The tiers a restore takes an image's bytes from before it falls back to the store: allocations already on the
 * device (the HBM tier), and chunks already verified in page-locked host memory (the host cache). A chunk found in
 * neither is read from the {@link ChunkStore}, verified against its digest and staged through
 * pinned buffers.
 *
 * <p>The contract a host cache signs: every chunk {@link Lease#find} returns has been checked against its digest
 * when it entered the cache, and its bytes stay where they are, unchanged, until the lease is closed. Copies from a
 * host cache are coalesced where chunks lie back to back in one {@link PinnedBuffer} and in one allocation, so lay
 * an image's chunks out in order where you can: one 4 MiB copy runs at 53 GB/s, sixteen 256 KiB ones at 35.
 */
@FunctionalInterface
public interface RestoreSource {

  /** Nothing but the store. */
  RestoreSource STORE_ONLY = manifest -> digest -> null;

  /**
   * Opens this source for one restore of {@code manifest}: what it finds stays valid until the lease is closed,
   * which the restore does once every copy from it has completed. Called on the restoring thread: be quick.
   */
  Lease lease(ImageManifest manifest);

  /** Where a verified chunk lies: {@code buffer} (pinned or registered host memory) from {@code offset}. */
  record HostChunk(PinnedBuffer buffer, long offset) {}

  /** One restore's view of a source. Used by one restore, from its threads; must be thread-safe. */
  @FunctionalInterface
  interface Lease extends AutoCloseable {

    /** The host copy of the verified chunk {@code digest}, or null when this source has not got it. */
    HostChunk find(Digest digest);

    /**
     * True when {@code allocation} is already on the device with the image's bytes at its address (the HBM tier:
     * mapped there by the restore's owner): nothing is copied into it, and launches never wait for it.
     */
    default boolean resident(ImageManifest.Allocation allocation) {
      return false;
    }

    /**
     * Device ranges {@code [start, end)}, disjoint and in address order, that hold the image's bytes already and
     * must not be written (the HBM tier's slabs, mapped read-only by the restore's owner). A restore copies nothing
     * into them: an allocation that lies partly in one is an ordinary unit whose copies leave that part out, and one
     * that lies wholly inside them is resident. None by default.
     */
    default List<long[]> residentRanges() {
      return List.of();
    }

    /**
     * A device address holding {@code allocation}'s bytes, all of them, in another GPU's memory (the node-wide HBM
     * tier: another device's slab mapped in this process), or 0. Read by this restore's device, or, with a {@link
     * #peerLink}, by that link's helper. The restore then copies the allocation over the peer link instead of from
     * the host, on a lane of its own, runs of allocations that lie back to back on both sides in one copy, each
     * allocation gated by its event on this device like any other. 0 by default.
     */
    default long peerCopy(ImageManifest.Allocation allocation) {
      return 0;
    }

    /**
     * The link whose helper device reads {@link #peerCopy}'s addresses, or null (the default) when this restore's
     * device reads them itself. With one, the memory is mapped for the helper alone (its own memory: a local
     * mapping), the helper copies each run into its ring and the target pulls it from there ({@link HelperLink});
     * the restore borrows the link for as long as it copies, so it must not be among its helpers as well.
     */
    default HelperLink peerLink() {
      return null;
    }

    /** Releases what the lease held on to. Idempotent. */
    @Override
    default void close() {}
  }
}
