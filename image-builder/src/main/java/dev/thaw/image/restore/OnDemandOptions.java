package dev.thaw.image.restore;

import dev.thaw.runtime.function.FunctionSession;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;

/**
 * How an on-demand restore streams: setters check and are fluent.
 */
public final class OnDemandOptions {

  /** Bytes queued on the restore stream ahead of the copy engine: about 1.2 ms at 53 GB/s. */
  public static final long DEFAULT_WINDOW_BYTES = 64L << 20;
  public static final long DEFAULT_POLL_NANOS = 20_000;
  /**
   * A helper lent for a restore gives it half its link: the other half keeps a request that reaches a function on the
   * helper meanwhile within 5% of its warm latency (the bound the share is chosen by; measured figures:
   * docs/design/memory-tiers.md, "The helper's share").
   */
  public static final double DEFAULT_HELPER_SHARE = 0.5;

  private long windowBytes = DEFAULT_WINDOW_BYTES;
  private boolean streamInBackground = true;
  private boolean trace;
  private boolean validate;
  private long pollNanos = DEFAULT_POLL_NANOS;
  private Promotion promotion = Promotion.REORDER;
  private List<HelperLink> helpers = List.of();
  private double helperShare = DEFAULT_HELPER_SHARE;

  /** Where an allocation a launch needs goes when it is not queued yet. */
  public enum Promotion {
    /** To the head of what is not queued: behind at most {@link #windowBytes()} on the one restore stream. */
    REORDER,
    /**
     * Onto a second restore stream, where it copies alongside the background order (on another copy engine, sharing
     * the link). Stream priorities do not help: the driver applies them to kernels only.
     */
    SECOND_STREAM
  }

  public Promotion promotion() {
    return promotion;
  }

  public OnDemandOptions setPromotion(Promotion p) {
    this.promotion = Objects.requireNonNull(p);
    return this;
  }

  public long windowBytes() {
    return windowBytes;
  }

  /**
   * How far the background order may run ahead of the copy engine. What is not yet queued can still be reordered:
   * a launch that needs it moves it to the head. {@link Long#MAX_VALUE} queues the whole image at once.
   */
  public OnDemandOptions setWindowBytes(long bytes) {
    if (bytes < 1) {
      throw new IllegalArgumentException("the restore window must be positive, not " + bytes);
    }
    this.windowBytes = bytes;
    return this;
  }

  public boolean streamInBackground() {
    return streamInBackground;
  }

  /**
   * False restores only what launches need until {@link OnDemandRestore#streamRest()} is called: the pure on-demand
   * order, and a way to hold the background restore back.
   */
  public OnDemandOptions setStreamInBackground(boolean on) {
    this.streamInBackground = on;
    return this;
  }

  public boolean trace() {
    return trace;
  }

  /**
   * Records a timing event around every launch, for {@link OnDemandRestore#trace()}: costs two event records per
   * launch. Residency events are always timed.
   */
  public OnDemandOptions setTrace(boolean on) {
    this.trace = on;
    return this;
  }

  public boolean validate() {
    return validate;
  }

  /**
   * Runs every launch as its PTX-instrumented twin, checked against "resident or waited for": the GPU's validating
   * mode ({@link OnDemandRestore#validation()}). Each launch then synchronizes: for tests and debugging only.
   */
  public OnDemandOptions setValidate(boolean on) {
    this.validate = on;
    return this;
  }

  public long pollNanos() {
    return pollNanos;
  }

  /** How long the restore thread parks between looks at the copy engine's progress. */
  public OnDemandOptions setPollNanos(long nanos) {
    if (nanos < 1_000 || nanos > 10_000_000) {
      throw new IllegalArgumentException("poll interval must be 1 µs to 10 ms, not " + nanos + " ns");
    }
    this.pollNanos = nanos;
    return this;
  }

  public List<HelperLink> helpers() {
    return helpers;
  }

  /**
   * Other GPUs' links this restore may use beside the target's own ({@link HelperLink}, made for the restore's
   * context): host-tier copies are split between them, each run of allocations to the link that would land it first.
   * Pass only helpers that are idle: the owner knows what runs on them. None by default.
   *
   * @throws IllegalArgumentException if a link is given twice
   */
  public OnDemandOptions setHelpers(List<HelperLink> links) {
    List<HelperLink> copy = List.copyOf(links);
    if (new HashSet<>(copy).size() != copy.size()) {
      throw new IllegalArgumentException("a helper link is given twice: " + copy);
    }
    this.helpers = copy;
    return this;
  }

  public double helperShare() {
    return helperShare;
  }

  /**
   * The part of each helper's measured link a restore may use, over (0, 1]: below 1 the restore thread paces what it
   * queues through a helper to that share of its rate, so that work on the helper's device (its own copies, its
   * memory's bandwidth) keeps the rest. The cost to a function running on the helper is measured by the multi-link
   * harness; {@link #DEFAULT_HELPER_SHARE} by default.
   */
  public OnDemandOptions setHelperShare(double share) {
    if (!(share > 0 && share <= 1)) {
      throw new IllegalArgumentException("a helper's share of its link is over (0, 1], not " + share);
    }
    this.helperShare = share;
    return this;
  }

  private FunctionSession.SlabSource slabSource;

  /** Where the session's slabs get their memory, or null (the default) for fresh memory, one plan for all. */
  public FunctionSession.SlabSource slabSource() {
    return slabSource;
  }

  /**
   * Maps the image with its read-only allocations ({@code ImageManifest.readOnlyAllocations()}) in slabs of their
   * own, each slab's memory from {@code source}: the HBM tier's exportable memory, or memory imported from it. The
   * restore must then be told which allocations are resident already (its {@link RestoreSource}).
   */
  public OnDemandOptions setSlabSource(FunctionSession.SlabSource source) {
    this.slabSource = source;
    return this;
  }

  /**
   * These options with the background streaming held back: the restore copies only what launches wait for until its
   * owner calls {@link OnDemandRestore#streamRest} (a group grants its ranks each other's memory first).
   */
  public OnDemandOptions heldBack() {
    return new OnDemandOptions().setStreamInBackground(false).setPromotion(promotion).setWindowBytes(windowBytes)
        .setTrace(trace).setValidate(validate).setPollNanos(pollNanos).setHelpers(helpers).setHelperShare(helperShare)
        .setSlabSource(slabSource);
  }
}
