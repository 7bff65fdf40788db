package dev.thaw.image.restore;

import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.DeviceMemoryInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.MemoryAccess;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Another GPU's PCIe link, lent to restores onto a target device: a staging ring in the helper's memory that the
 * target may read, a stream on the helper that copies host bytes into the ring over the helper's own link, and a
 * stream on the target that pulls each filled slot over the peer link (NVLink) into place. A restore that has links
 * splits its host-tier copies between the target's link and theirs, and records each allocation's event on the
 * target, so launches wait for it as for any other.
 *
 * <p>The same ring relays the helper's own memory (the node-wide HBM tier, mapped on the helper only): the helper's
 * stream copies from it into a slot at HBM speed and the target pulls the slot, so the target never needs a mapping of
 * that memory ({@link RestoreSource.Lease#peerLink}).
 *
 * <p>Everything is ordered on the devices, never on the host: the helper's stream waits (an event recorded on the
 * target after a slot's last peer copy) before it refills the slot, and the target's stream waits (an event recorded
 * on the helper after a slot's host copies) before it pulls from it.
 *
 * <p>Made once by a long-lived owner (a pooled worker, a benchmark) that holds a context on the helper device, and lent
 * to one restore at a time: from the restore's start until every byte of it is resident (or it stops), after which
 * the owner may lend it again or close it while the restore serves on. {@link #open} measures the three links it
 * uses; {@link #whyUnusable} says why a helper would not do (not peer-capable, short of memory).
 */
public final class HelperLink implements AutoCloseable {

  /** Slots of the ring: a slot fills while the one before it is pulled, and one more keeps the helper's link busy. */
  public static final int DEFAULT_SLOTS = 4;
  /** 32 MiB: ~0.6 ms of host copy at 55 GB/s, pulled in ~0.08 ms at 393 GB/s; 128 MiB of the helper's memory. */
  public static final long DEFAULT_SLOT_BYTES = 32L << 20;
  /** A helper with less free memory than this besides the ring is left to its own work. */
  public static final long DEFAULT_MIN_FREE_BYTES = 2L << 30;
  /** Bytes each of the three measured copies moves at {@link #open}; 0 measures nothing. */
  public static final long DEFAULT_MEASURE_BYTES = 32L << 20;

  /** How a link is made. Setters check and are fluent. */
  public static final class Options {
    private int slots = DEFAULT_SLOTS;
    private long slotBytes = DEFAULT_SLOT_BYTES;
    private long minFreeBytes = DEFAULT_MIN_FREE_BYTES;
    private long measureBytes = DEFAULT_MEASURE_BYTES;
    private double[] rates;

    public int slots() {
      return slots;
    }

    public Options slots(int n) {
      if (n < 2 || n > 64) {
        throw new IllegalArgumentException("a helper's ring needs 2 to 64 slots, not " + n);
      }
      this.slots = n;
      return this;
    }

    public long slotBytes() {
      return slotBytes;
    }

    public Options slotBytes(long bytes) {
      if (bytes < (1L << 20) || bytes > (1L << 30)) {
        throw new IllegalArgumentException("a slot of the helper's ring is 1 MiB to 1 GiB, not " + bytes);
      }
      this.slotBytes = bytes;
      return this;
    }

    public long minFreeBytes() {
      return minFreeBytes;
    }

    /** The helper's free memory, besides the ring, below which it is not used ({@link #whyUnusable}). */
    public Options minFreeBytes(long bytes) {
      if (bytes < 0) {
        throw new IllegalArgumentException("free memory must not be negative: " + bytes);
      }
      this.minFreeBytes = bytes;
      return this;
    }

    public long measureBytes() {
      return measureBytes;
    }

    /**
     * Bytes of each measuring copy at {@link #open} (host → target, host → helper, helper → target, best of three);
     * 0 measures nothing, and a restore then splits as if every link were as fast as the target's.
     */
    public Options measureBytes(long bytes) {
      if (bytes < 0 || bytes > slotBytes) {
        throw new IllegalArgumentException("measuring copies are 0 to a slot's bytes, not " + bytes);
      }
      this.measureBytes = bytes;
      return this;
    }

    /** The rates given instead of measured ({@link #rates(double, double, double)}), or null. */
    double[] rates() {
      return rates == null ? null : rates.clone();
    }

    /**
     * Takes these GB/s (host → target, host → helper, helper → target) instead of measuring them at {@link #open}:
     * an owner that measured the node's links once hands them to every link it makes.
     */
    public Options rates(double directGBps, double hostGBps, double peerGBps) {
      for (double r : new double[] {directGBps, hostGBps, peerGBps}) {
        if (!(r > 0) || Double.isInfinite(r)) {
          throw new IllegalArgumentException("a link's rate is a positive number of GB/s, not " + r);
        }
      }
      this.rates = new double[] {directGBps, hostGBps, peerGBps};
      return this;
    }
  }

  /** One slot being filled by a restore: where its bytes go on the target, in the order they were copied in. */
  static final class Slot {
    final int index;
    final long address;
    final long bytes;
    long used;
    final List<long[]> pulls = new ArrayList<>();

    Slot(int index, long address, long bytes) {
      this.index = index;
      this.address = address;
      this.bytes = bytes;
    }

    long room() {
      return bytes - used;
    }
  }

  private final GpuContext target;
  private final GpuContext helper;
  private final Options options;
  private final DeviceBuffer ring;
  private final GpuStream hostStream;
  private final GpuStream peerStream;
  private final GpuEvent[] filled;
  private final GpuEvent[] drained;
  private final boolean[] drainedRecorded;
  private final double directGBps;
  private final double hostGBps;
  private final double peerGBps;
  private final AtomicBoolean lent = new AtomicBoolean();
  private final AtomicBoolean closed = new AtomicBoolean();
  private int next;

  private HelperLink(GpuContext target, GpuContext helper, Options options, DeviceBuffer ring, GpuStream hostStream,
      GpuStream peerStream, GpuEvent[] filled, GpuEvent[] drained, double[] measured) {
    this.target = target;
    this.helper = helper;
    this.options = options;
    this.ring = ring;
    this.hostStream = hostStream;
    this.peerStream = peerStream;
    this.filled = filled;
    this.drained = drained;
    this.drainedRecorded = new boolean[filled.length];
    this.directGBps = measured[0];
    this.hostGBps = measured[1];
    this.peerGBps = measured[2];
  }

  /**
   * Why {@code helper} cannot lend its link to restores onto {@code target}, or empty when it can: it is the target's
   * device, the target cannot reach its memory ({@code cuDeviceCanAccessPeer}), or it has less free memory than the
   * ring and {@link Options#minFreeBytes()} need.
   */
  public static Optional<String> whyUnusable(GpuContext target, GpuContext helper, Options options) {
    int t = target.device().ordinal();
    int h = helper.device().ordinal();
    if (t == h) {
      return Optional.of("device " + h + " is the target itself");
    }
    if (target.driver() != helper.driver()) {
      return Optional.of("device " + h + " belongs to another driver than the target");
    }
    if (!target.driver().canAccessPeer(t, h)) {
      return Optional.of("device " + t + " cannot reach the memory of device " + h + " (not peers)");
    }
    DeviceMemoryInfo free = helper.memoryInfo();
    long ringBytes = (long) options.slots() * options.slotBytes();
    if (free.freeBytes() < ringBytes + options.minFreeBytes()) {
      return Optional.of(String.format("device %d is short of memory: %d MiB free, the ring needs %d MiB and %d MiB"
          + " must stay free", h, free.freeBytes() >> 20, ringBytes >> 20, options.minFreeBytes() >> 20));
    }
    return Optional.empty();
  }

  /**
   * Makes the ring, streams and events, and measures the links unless {@link Options#measureBytes()} is 0.
   *
   * @throws IllegalArgumentException with {@link #whyUnusable}'s reason when the helper would not do
   */
  public static HelperLink open(GpuContext target, GpuContext helper, Options options) {
    Optional<String> why = whyUnusable(target, helper, options);
    if (why.isPresent()) {
      throw new IllegalArgumentException("device " + helper.device().ordinal() + " cannot help restores onto device "
          + target.device().ordinal() + ": " + why.get());
    }
    List<AutoCloseable> made = new ArrayList<>();
    try {
      // From the top of the address space: the images this process restores need their recorded addresses.
      DeviceBuffer ring = helper.allocateScratch((long) options.slots() * options.slotBytes());
      made.add(ring);
      ring.setAccessFor(target.device().ordinal(), MemoryAccess.READ);
      GpuStream hostStream = helper.createStream();
      made.add(hostStream);
      GpuStream peerStream = target.createStream();
      made.add(peerStream);
      GpuEvent[] filled = new GpuEvent[options.slots()];
      GpuEvent[] drained = new GpuEvent[options.slots()];
      for (int i = 0; i < filled.length; i++) {
        filled[i] = helper.createEvent(false);
        made.add(filled[i]);
        drained[i] = target.createEvent(false);
        made.add(drained[i]);
      }
      double[] measured = options.rates() != null ? options.rates()
          : options.measureBytes() == 0 ? new double[] {Double.NaN, Double.NaN, Double.NaN}
          : measure(target, helper, ring, hostStream, peerStream, options.measureBytes());
      return new HelperLink(target, helper, options, ring, hostStream, peerStream, filled, drained, measured);
    } catch (RuntimeException e) {
      for (int i = made.size() - 1; i >= 0; i--) {
        try {
          made.get(i).close();
        } catch (Exception suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      throw e;
    }
  }

  /** GB/s of host → target, host → helper's ring, ring → target: the best of three copies of {@code bytes} each. */
  private static double[] measure(GpuContext target, GpuContext helper, DeviceBuffer ring, GpuStream hostStream,
      GpuStream peerStream, long bytes) {
    try (PinnedBuffer host = target.allocatePinned(bytes); DeviceBuffer scratch = target.allocateScratch(bytes);
        GpuEvent t0 = target.createEvent(true); GpuEvent t1 = target.createEvent(true);
        GpuEvent h0 = helper.createEvent(true); GpuEvent h1 = helper.createEvent(true)) {
      double[] best = new double[3];
      for (int round = 0; round < 3; round++) {
        peerStream.record(t0);
        peerStream.copyHostToDeviceAsync(scratch.address(), host, 0, bytes);
        peerStream.record(t1);
        t1.synchronize();
        best[0] = Math.max(best[0], gbps(bytes, t1.elapsedMillisSince(t0)));
        hostStream.record(h0);
        hostStream.copyHostToDeviceAsync(ring.address(), host, 0, bytes);
        hostStream.record(h1);
        h1.synchronize();
        best[1] = Math.max(best[1], gbps(bytes, h1.elapsedMillisSince(h0)));
        peerStream.record(t0);
        peerStream.copyDeviceToDeviceAsync(scratch.address(), ring.address(), bytes);
        peerStream.record(t1);
        t1.synchronize();
        best[2] = Math.max(best[2], gbps(bytes, t1.elapsedMillisSince(t0)));
      }
      return best;
    }
  }

  private static double gbps(long bytes, float millis) {
    return millis > 0 ? bytes / (millis * 1e6) : Double.POSITIVE_INFINITY;
  }

  public GpuContext target() {
    return target;
  }

  public GpuContext helper() {
    return helper;
  }

  public Options options() {
    return options;
  }

  /** Host → target over the target's own link, as measured at {@link #open}; NaN when not measured. */
  public double directGBps() {
    return directGBps;
  }

  /** Host → the helper's ring over the helper's link; NaN when not measured. */
  public double hostGBps() {
    return hostGBps;
  }

  /** The helper's ring → target over the peer link; NaN when not measured. */
  public double peerGBps() {
    return peerGBps;
  }

  /** What the link carries host → target, its two copies overlapping: the slower of them; NaN when not measured. */
  public double gbps() {
    return Math.min(hostGBps, peerGBps);
  }

  // ---- lent to one restore, used under its lock ----

  void borrow() {
    if (closed.get()) {
      throw new IllegalStateException("the helper link to device " + helper.device().ordinal() + " is closed");
    }
    if (!lent.compareAndSet(false, true)) {
      throw new IllegalStateException("the helper link to device " + helper.device().ordinal()
          + " is lent to a restore that is not closed yet");
    }
  }

  void giveBack() {
    lent.set(false);
  }

  /** The target's stream every pull is queued on, and after which the restore records its events. */
  GpuStream peerStream() {
    return peerStream;
  }

  GpuStream hostStream() {
    return hostStream;
  }

  /** The next slot in ring order; the helper's stream waits, on the device, until its last pull has completed. */
  Slot begin() {
    int k = next;
    next = (next + 1) % filled.length;
    if (drainedRecorded[k]) {
      hostStream.waitFor(drained[k]);
    }
    return new Slot(k, ring.address() + k * options.slotBytes(), options.slotBytes());
  }

  /** Queues {@code bytes} from host memory into {@code slot} on the helper's stream, to be pulled to {@code dst}. */
  void fill(Slot slot, long dst, PinnedBuffer src, long offset, long bytes) {
    hostStream.copyHostToDeviceAsync(slot.address + slot.used, src, offset, bytes);
    pullLater(slot, dst, bytes);
  }

  /**
   * Queues {@code bytes} from the helper's own memory at {@code src} (mapped for the helper) into {@code slot} on the
   * helper's stream, to be pulled to {@code dst}.
   */
  void fillFromHelper(Slot slot, long dst, long src, long bytes) {
    hostStream.copyDeviceToDeviceAsync(slot.address + slot.used, src, bytes);
    pullLater(slot, dst, bytes);
  }

  /** Notes the slot's next {@code bytes} for {@code dst}: one pull with the one before when both sides continue it. */
  private static void pullLater(Slot slot, long dst, long bytes) {
    long[] last = slot.pulls.isEmpty() ? null : slot.pulls.get(slot.pulls.size() - 1);
    if (last != null && last[0] + last[2] == dst && last[1] + last[2] == slot.used) {
      last[2] += bytes;
    } else {
      slot.pulls.add(new long[] {dst, slot.used, bytes});
    }
    slot.used += bytes;
  }

  /**
   * Queues the slot's pulls on the target's stream behind its host copies, and marks it drained after them; returns
   * the number of pulls.
   */
  int send(Slot slot) {
    filled[slot.index].record(hostStream);
    peerStream.waitFor(filled[slot.index]);
    for (long[] p : slot.pulls) {
      peerStream.copyDeviceToDeviceAsync(p[0], slot.address + p[1], p[2]);
    }
    drained[slot.index].record(peerStream);
    drainedRecorded[slot.index] = true;
    return slot.pulls.size();
  }

  /** Waits for both streams: what a restore that stops does before it gives the link back. */
  void synchronize() {
    hostStream.synchronize();
    peerStream.synchronize();
  }

  /** Frees the ring, the streams and the events. Idempotent; the link must not be lent. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    RuntimeException failure = null;
    List<AutoCloseable> all = new ArrayList<>(List.of(filled));
    all.addAll(List.of(drained));
    all.add(hostStream);
    all.add(peerStream);
    all.add(ring);
    for (AutoCloseable c : all) {
      try {
        c.close();
      } catch (Exception e) {
        failure = failure == null ? new IllegalStateException("closing the helper link failed", e) : failure;
      }
    }
    if (failure != null) {
      throw failure;
    }
  }

  @Override
  public String toString() {
    return String.format("HelperLink[device %d → device %d, %d x %d MiB, %.1f GB/s]", helper.device().ordinal(),
        target.device().ordinal(), filled.length, options.slotBytes() >> 20, gbps());
  }
}
