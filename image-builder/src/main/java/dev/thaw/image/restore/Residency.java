package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.staging.StagingRing;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Which of an image's allocations are on the device, and the copies that put them there: one per restore.
 *
 * <p>Each unit (an allocation of the {@link RestorePlan}) is pending, queued or resident. Queuing a unit puts its
 * copies on the restore stream and records an event after them; the unit is resident once that event has completed.
 * Two parties queue units, under one lock: the restore thread, in plan order, keeping at most
 * {@link OnDemandOptions#windowBytes()} queued ahead of the copy engine, and the launching thread, which
 * {@linkplain #promote promotes} a pending unit a launch needs to the head (it is queued at once, behind only what is
 * in the window). One restore stream keeps every unit's copies in queue order, so the last event recorded covers all
 * units queued before it.
 *
 * <p><b>Lanes.</b> Runs of host-tier units go through one of several lanes: the target's own link (the restore
 * stream) or a {@link HelperLink} (another GPU's link and a peer copy), each a stream on the target where the units'
 * events are recorded, in queue order per lane; units a lease can copy from another GPU's memory (the node-wide HBM
 * tier) go through a lane of their own. The restore thread gives the next run in plan order to the lane that would
 * land it first, among lanes with less than the window queued: each link pulls work as fast as it drains it, so the
 * split follows what the links actually carry. A launch's promotion takes the target's own link, or for a unit that
 * comes from another GPU's memory through a link's ring, that ring.
 *
 * <p>Runs from another GPU's memory merge further ({@link #PEER_MERGE_BYTES}): allocations that lie back to back both
 * there and on the target are one copy, and every allocation of the run is gated by the event after it, so a launch
 * never reads a byte before it landed, and waits for at most the rest of its run.
 *
 * <p>Bytes in the lease's {@linkplain RestoreSource.Lease#residentRanges() resident ranges} are never copied: a unit
 * lying partly in one (a packed weight that runs from an HBM-tier slab into a fresh one) is an ordinary unit whose
 * copies leave that part out, and one lying wholly inside them is resident from the start.
 *
 * <p>From a host tier a unit is queued without waiting for anything. From the store its chunks are read and
 * verified into pinned staging by the restore thread first; a launch that needs such a unit waits, on its thread, for
 * that read (never for a copy: it waits until the copy is queued). No byte reaches the device unverified: host
 * chunks were verified when they entered their cache, store chunks right before their copy is queued.
 *
 * <p>The restore thread never changes a mapping's access: the read-only slabs ({@link SlabProtection}, carried here
 * for the gate) are write-protected by the restore's owner while the function is idle, once this is complete.
 */
final class Residency {

  static final int PENDING = 0;
  static final int QUEUED = 1;
  static final int RESIDENT = 2;

  /**
   * The most the restore thread merges into one run of copies: 8 MiB copy in ~150 µs at 53 GB/s, so an allocation at
   * the start of a run waits little for the rest, while copies stay large enough for full speed.
   */
  static final long MERGE_BYTES = 8L << 20;

  /**
   * The most merged into one copy from another GPU's memory. A copy over the peer link pays a fixed start-up before
   * it moves a byte (docs/design/memory-tiers.md has the measurement); runs this large keep that under a tenth of the
   * copy, while a launch waits at NVLink speed for at most one of them beyond its own allocation.
   */
  static final long PEER_MERGE_BYTES = 32L << 20;

  /**
   * What the peer lane may have queued at the least: four runs. The peer link drains a window of the host link's size
   * several times faster than the host link, and the restore thread, which polls, must refill it before it runs dry.
   */
  static final long PEER_WINDOW_BYTES = 4 * PEER_MERGE_BYTES;

  /**
   * One copy of a unit, from host memory ({@code buffer} at {@code offset}) or, with {@code buffer} null, from the
   * device address {@code offset} (another GPU's memory this device may read): mutable while chunks are coalesced.
   */
  private static final class HostCopy {
    final long dst;
    final PinnedBuffer buffer;
    final long offset;
    long bytes;

    HostCopy(long dst, PinnedBuffer buffer, long offset, long bytes) {
      this.dst = dst;
      this.buffer = buffer;
      this.offset = offset;
      this.bytes = bytes;
    }
  }

  private static final HostCopy[] FROM_STORE = new HostCopy[0];

  /**
   * The most store bytes the restore thread has being read ahead of what it queues: reads run in order on the
   * store's readers, so a unit a launch asks for that is not among them waits behind at most this much (tens of
   * milliseconds at the store's pace), while what the plan wants next is read at the readers' full pace instead of one
   * allocation at a time.
   */
  static final long READ_AHEAD_BYTES = 128L << 20;

  /** Where in a staging slot each unit's part starts: copies from aligned host addresses run at full speed. */
  private static final long PART_ALIGNMENT = 256;

  /** Chunks of one unit read into a staging slot at {@code at}: the unit's bytes {@code [from, from + bytes)}. */
  private record Part(int unit, long at, long from, long bytes, boolean last, List<Future<?>> reads) {}

  /**
   * Where runs of units are copied, and their events recorded: a stream on the target, with the units queued on it
   * in queue order. Guarded by the residency's lock.
   */
  private static final class Lane {
    final String name;
    final GpuStream stream;
    /** Null: copies go straight to the device on {@link #stream}. */
    final HelperLink link;
    /** What it carries relative to the other lanes, for the split when windows do not bound it. */
    final double rate;
    /** The most it has outstanding (queued, not landed) before the restore thread gives it more. */
    final long window;
    final ArrayDeque<Integer> inFlight = new ArrayDeque<>();
    GpuEvent last;
    long queued;
    long landed;
    long bytes;

    Lane(String name, GpuStream stream, HelperLink link, double rate, long window) {
      this.name = name;
      this.stream = stream;
      this.link = link;
      this.rate = rate;
      this.window = window;
    }

    long outstanding() {
      return queued - landed;
    }
  }

  /** Store chunks being read into one staging slot, parts in the order their copies are queued. */
  private static final class StoreBatch {
    final int slot;
    final PinnedBuffer buffer;
    final List<Part> parts = new ArrayList<>();
    long used;
    int queuedParts;

    StoreBatch(int slot, PinnedBuffer buffer) {
      this.slot = slot;
      this.buffer = buffer;
    }
  }

  private final RestorePlan plan;
  private final RestoreResources resources;
  private final ChunkStore store;
  private final RestoreSource.Lease lease;
  private final OnDemandOptions options;
  private final GpuStream stream;
  /** Where promoted units go with {@link OnDemandOptions.Promotion#SECOND_STREAM}; else {@link #stream}. */
  private final GpuStream urgentStream;
  /** The target's own link: the restore stream. */
  private final Lane direct;
  /** Promotions: {@link #direct} unless they have a second stream. */
  private final Lane urgentLane;
  /**
   * Copies from another GPU's memory (the lease's peer copies): on a stream of the target's own, or through the ring of
   * the lease's {@link RestoreSource.Lease#peerLink}.
   */
  private final Lane peerLane;
  /** The helpers' links, in the options' order. */
  private final Lane[] helperLanes;
  /** Every lane, each once. */
  private final List<Lane> lanes = new ArrayList<>();
  private final int units;
  private final AtomicIntegerArray state;
  private final GpuEvent[] events;
  private final long[] queuedNanos;
  private final HostCopy[][] copies;
  /** Bytes each unit's copies move: its size, less what lies in a resident range. */
  private final long[] copyBytes;
  /** The lease's resident ranges {@code [start, end)}, in address order. */
  private final long[] residentStarts;
  private final long[] residentEnds;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition queued = lock.newCondition();
  private final ArrayDeque<Integer> urgent = new ArrayDeque<>();
  private final List<GpuEvent> used = new ArrayList<>();
  private final CompletableFuture<Void> done = new CompletableFuture<>();
  private int cursor;
  private int residentUnits;
  private long queuedBytes;
  private long residentBytes;
  private long hostBytes;
  private long storeBytes;
  private long peerBytes;
  private int copyCount;
  private int promotions;
  /** When the restore thread began, on the {@link System#nanoTime()} clock: what a helper's share paces against. */
  private long pacedFromNanos;
  private volatile boolean complete;
  private volatile Throwable failure;
  private volatile boolean background;
  private volatile boolean stopping;
  private Future<?> pump;
  /** The helpers' links are this restore's: from {@link #start} until it is complete (or stopped). */
  private volatile boolean linksBorrowed;
  /** The restore thread's own: batches being read, oldest first (each holds a slot, in ring order). */
  private final ArrayDeque<StoreBatch> reading = new ArrayDeque<>();
  /** The restore thread's own: how many of each unit's chunks are being read or were read. */
  private final int[] assignedChunks;
  /** The restore thread's own: units before it in plan order need no read ahead. */
  private int readCursor;
  private final SlabProtection protection;
  /** When the restore thread began, and when the first unit's copies were queued: for the trace. 0 until then. */
  private volatile long pumpStartNanos;
  private volatile long firstQueuedNanos;
  /** When the first copy call began: the trace tells the driver's part from the restore thread's. 0 before. */
  private volatile long firstCopyNanos;

  Residency(RestorePlan plan, RestoreResources resources, ChunkStore store, RestoreSource.Lease lease,
      OnDemandOptions options, SlabProtection protection) {
    this.protection = protection;
    this.plan = plan;
    this.resources = resources;
    this.store = store;
    this.lease = lease;
    this.options = options;
    this.stream = resources.stream();
    this.urgentStream = options.promotion() == OnDemandOptions.Promotion.SECOND_STREAM ? resources.secondStream()
        : stream;
    List<HelperLink> links = options.helpers();
    double directRate = directRate(links);
    long window = options.windowBytes();
    this.direct = new Lane("direct", stream, null, directRate, window);
    lanes.add(direct);
    this.urgentLane = urgentStream == stream ? direct : new Lane("urgent", urgentStream, null, directRate, window);
    if (urgentLane != direct) {
      lanes.add(urgentLane);
    }
    HelperLink relay = lease.peerLink();
    if (relay != null && relay.target() != resources.context()) {
      throw new IllegalArgumentException(relay + " relays to another context than this restore's");
    }
    if (relay != null && links.contains(relay)) {
      throw new IllegalArgumentException(relay + " is lent as a helper and relays the peer copies too: one or the "
          + "other");
    }
    long peerWindow = Math.max(window, PEER_WINDOW_BYTES);
    this.peerLane = relay == null ? new Lane("peer", resources.peerStream(), null, directRate, peerWindow)
        : new Lane("peer", relay.peerStream(), relay, directRate, peerWindow);
    lanes.add(peerLane);
    this.helperLanes = new Lane[links.size()];
    for (int i = 0; i < helperLanes.length; i++) {
      HelperLink link = links.get(i);
      double rate = Double.isNaN(link.gbps()) ? directRate : link.gbps();
      helperLanes[i] = new Lane("device " + link.helper().device().ordinal(), link.peerStream(), link,
          rate * options.helperShare(), window);
      lanes.add(helperLanes[i]);
    }
    this.units = plan.unitCount();
    this.state = new AtomicIntegerArray(units);
    this.events = new GpuEvent[units];
    this.queuedNanos = new long[units];
    this.copies = new HostCopy[units][];
    this.copyBytes = new long[units];
    this.assignedChunks = new int[units];
    this.background = options.streamInBackground();
    List<long[]> ranges = new ArrayList<>(lease.residentRanges());
    ranges.sort(Comparator.comparingLong(r -> r[0]));
    this.residentStarts = new long[ranges.size()];
    this.residentEnds = new long[ranges.size()];
    for (int i = 0; i < ranges.size(); i++) {
      residentStarts[i] = ranges.get(i)[0];
      residentEnds[i] = ranges.get(i)[1];
    }
    for (int u = 0; u < units; u++) {
      ImageManifest.Allocation a = plan.unit(u);
      copyBytes[u] = a.size() - residentBytesIn(a.address(), a.address() + a.size());
      if (lease.resident(a) || copyBytes[u] == 0) {
        state.set(u, RESIDENT);
        residentUnits++;
      }
    }
  }

  /** The target's own link in GB/s as the helpers measured it (their mean), or 1 when none did: only ratios count. */
  private static double directRate(List<HelperLink> links) {
    double sum = 0;
    int n = 0;
    for (HelperLink l : links) {
      if (!Double.isNaN(l.directGBps())) {
        sum += l.directGBps();
        n++;
      }
    }
    return n == 0 ? 1 : sum / n;
  }

  /** Bytes of {@code [start, end)} that lie in a resident range. */
  private long residentBytesIn(long start, long end) {
    long bytes = 0;
    for (int i = firstResidentEndingAfter(start); i < residentStarts.length && residentStarts[i] < end; i++) {
      bytes += Math.min(end, residentEnds[i]) - Math.max(start, residentStarts[i]);
    }
    return bytes;
  }

  /** The index of the first resident range that ends after {@code address} (the ranges are disjoint and sorted). */
  private int firstResidentEndingAfter(long address) {
    int lo = 0;
    int hi = residentEnds.length;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (residentEnds[mid] <= address) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  /**
   * Adds to {@code out} the copies of {@code bytes} from {@code buffer} at {@code offset} to {@code dst} that leave
   * out every resident range: the whole copy where it touches none.
   */
  private void addOutsideResident(List<HostCopy> out, long dst, PinnedBuffer buffer, long offset, long bytes) {
    long end = dst + bytes;
    long at = dst;
    for (int i = firstResidentEndingAfter(dst); i < residentStarts.length && residentStarts[i] < end; i++) {
      if (residentStarts[i] > at) {
        out.add(new HostCopy(at, buffer, offset + (at - dst), residentStarts[i] - at));
      }
      at = Math.max(at, residentEnds[i]);
    }
    if (at < end) {
      out.add(new HostCopy(at, buffer, offset + (at - dst), end - at));
    }
  }

  /** Borrows the helpers' links (and the peer copies' relay) and starts the restore thread. */
  void start() {
    List<HelperLink> borrowed = new ArrayList<>();
    try {
      for (Lane lane : borrowedLanes()) {
        lane.link.borrow();
        borrowed.add(lane.link);
      }
    } catch (RuntimeException e) {
      borrowed.forEach(HelperLink::giveBack);
      throw e;
    }
    linksBorrowed = true;
    pump = resources.pump().submit(this::pump);
  }

  // ---- what launches ask ----

  /** True once every unit is resident (seen by the restore thread): launches then pass at no cost. */
  boolean isComplete() {
    return complete;
  }

  /**
   * True once every unit is resident by its events, asked now: the restore thread may not have noticed yet ({@link
   * #isComplete} follows on its next round). For the slabs' protection at an idle point, not for launches.
   */
  boolean landed() {
    if (complete) {
      return true;
    }
    lock.lock();
    try {
      retire();
      return residentUnits == units;
    } finally {
      lock.unlock();
    }
  }

  int state(int unit) {
    return state.get(unit);
  }

  /** The event that completes when {@code unit} is resident; valid once the unit is queued. */
  GpuEvent event(int unit) {
    return events[unit];
  }

  /**
   * Queues {@code unit} now if it is pending. From a host tier that is immediate; from the store the calling thread
   * waits until the restore thread has read and verified it and queued its copy.
   */
  void promote(int unit) {
    lock.lock();
    try {
      checkFailure();
      if (state.get(unit) != PENDING) {
        return;
      }
      promotions++;
      HostCopy[] c = hostCopies(unit);
      if (c != FROM_STORE) {
        // Another GPU's memory the target cannot read comes through the relay's ring; the rest on the urgent lane.
        queueHost(unit, fromPeer(c) && peerLane.link != null ? peerLane : urgentLane);
        return;
      }
      urgent.addFirst(unit);
      while (state.get(unit) == PENDING) {
        queued.awaitUninterruptibly();
        checkFailure();
      }
    } finally {
      lock.unlock();
    }
  }

  /**
   * Queues every pending unit and returns the events that complete when all are resident (none when all already
   * are): what a launch that cannot be gated on its arguments waits for. The last event of each restore stream.
   */
  GpuEvent[] promoteAll() {
    lock.lock();
    try {
      checkFailure();
      boolean fromStore = false;
      for (int u = 0; u < units; u++) {
        if (state.get(u) != PENDING) {
          continue;
        }
        promotions++;
        if (hostCopies(u) != FROM_STORE) {
          queueRun(u, true);
        } else {
          urgent.addLast(u);
          fromStore = true;
        }
      }
      if (fromStore) {
        for (int u = 0; u < units; u++) {
          while (state.get(u) == PENDING) {
            queued.awaitUninterruptibly();
            checkFailure();
          }
        }
      }
      if (complete) {
        return new GpuEvent[0];
      }
      List<GpuEvent> all = new ArrayList<>(lanes.size());
      for (Lane lane : lanes) {
        if (lane.last != null) {
          all.add(lane.last);
        }
      }
      return all.toArray(new GpuEvent[0]);
    } finally {
      lock.unlock();
    }
  }

  /** Lets the restore thread queue the units no launch asked for, in plan order. */
  void streamRest() {
    background = true;
  }

  // ---- the restore thread ----

  private void pump() {
    pumpStartNanos = System.nanoTime();
    pacedFromNanos = pumpStartNanos;
    try {
      while (!stopping) {
        int fromStore = -1;
        lock.lock();
        try {
          retire();
          if (residentUnits == units) {
            complete = true;
            // Every copy through them has landed (their units' events retired): their owner may lend them again.
            giveBackLinks();
            done.complete(null);
            return;
          }
          Integer u = urgent.poll();
          if (u != null) {
            if (state.get(u) == PENDING) {
              fromStore = u;
            } else {
              continue;
            }
          } else if (background) {
            int next = nextPending();
            if (next >= 0) {
              if (hostCopies(next) != FROM_STORE) {
                if (queueRun(next, false)) {
                  continue;
                }
              } else if (direct.outstanding() < options.windowBytes()) {
                fromStore = next;
              }
            }
          }
        } finally {
          lock.unlock();
        }
        if (fromStore >= 0) {
          stageFromStore(fromStore);
        } else {
          LockSupport.parkNanos(options.pollNanos());
        }
      }
    } catch (Throwable t) {
      fail(t);
    } finally {
      abandonReads();
    }
  }

  /** Under the lock: marks resident the queued units whose events have completed, in each lane's queue order. */
  private void retire() {
    for (Lane lane : lanes) {
      Integer head;
      while ((head = lane.inFlight.peek()) != null && events[head].isComplete()) {
        lane.inFlight.poll();
        state.set(head, RESIDENT);
        residentUnits++;
        residentBytes += plan.unit(head).size();
        lane.landed += plan.unit(head).size();
      }
    }
  }

  /** Under the lock: the first pending unit in plan order, or -1. */
  private int nextPending() {
    while (cursor < units && state.get(cursor) != PENDING) {
      cursor++;
    }
    return cursor < units ? cursor : -1;
  }

  /** Under the lock: the unit's copies from the host tier, coalesced; {@link #FROM_STORE} if a chunk is not there. */
  private HostCopy[] hostCopies(int unit) {
    HostCopy[] c = copies[unit];
    if (c != null) {
      return c;
    }
    ImageManifest.Allocation a = plan.unit(unit);
    List<HostCopy> out = new ArrayList<>(4);
    long peer = lease.peerCopy(a);
    if (peer != 0) {
      out.add(new HostCopy(a.address(), null, peer, a.size()));
    }
    HostCopy cur = null;
    for (ImageManifest.Chunk chunk : peer != 0 ? List.<ImageManifest.Chunk>of() : a.chunks()) {
      RestoreSource.HostChunk h = lease.find(chunk.digest());
      if (h == null) {
        copies[unit] = FROM_STORE;
        return FROM_STORE;
      }
      long dst = a.address() + chunk.offset();
      if (cur != null && cur.buffer == h.buffer() && cur.offset + cur.bytes == h.offset() && cur.dst + cur.bytes == dst) {
        cur.bytes += chunk.length();
      } else {
        cur = new HostCopy(dst, h.buffer(), h.offset(), chunk.length());
        out.add(cur);
      }
    }
    if (copyBytes[unit] != a.size()) {
      List<HostCopy> clipped = new ArrayList<>(out.size() + 1);
      for (HostCopy h : out) {
        addOutsideResident(clipped, h.dst, h.buffer, h.offset, h.bytes);
      }
      out = clipped;
    }
    c = out.toArray(new HostCopy[0]);
    copies[unit] = c;
    return c;
  }

  /** Under the lock: queues a host-tier (or peer) unit's copies and its event straight onto {@code lane}. */
  private void queueHost(int unit, Lane lane) {
    if (lane.link != null) {
      throughHelper(lane.link, List.of(copies[unit]));
    } else {
      for (HostCopy c : copies[unit]) {
        copy(lane.stream, c.dst, c.buffer, c.offset, c.bytes);
      }
    }
    count(copies[unit], copyBytes[unit]);
    lane.bytes += copyBytes[unit];
    recordQueued(lane, unit);
  }

  /** Under the lock: adds a unit's copied bytes to the host tier's or the peer's count. */
  private void count(HostCopy[] unitCopies, long bytes) {
    if (fromPeer(unitCopies)) {
      peerBytes += bytes;
    } else {
      hostBytes += bytes;
    }
  }

  /** Whether a unit's copies read another GPU's memory (the lease's peer copy) rather than host memory. */
  private static boolean fromPeer(HostCopy[] unitCopies) {
    return unitCopies.length > 0 && unitCopies[0].buffer == null;
  }

  /**
   * Under the lock: queues host-tier unit {@code first} and the pending host-tier units that follow it in plan order
   * while each lies right after the previous one both on the device and in host memory (a packed image from a host
   * cache laid out in restore order, or another GPU's slab laid out as the target's), up to {@link #MERGE_BYTES}
   * ({@link #PEER_MERGE_BYTES} from another GPU's memory; or the lane's window, when smaller): one copy instead of one
   * per allocation, one event for all of them. The run goes to the lane that would land it first among those with room
   * in their window (with {@code force}, among all: what a launch that waits for everything asks); false, and nothing
   * queued, when none has room.
   */
  private boolean queueRun(int first, boolean force) {
    boolean fromPeer = fromPeer(copies[first]);
    if (!force && (fromPeer ? !hasRoom(peerLane, System.nanoTime()) : pickLane(0, false) == null)) {
      return false;
    }
    List<HostCopy> run = new ArrayList<>();
    for (HostCopy c : copies[first]) {
      run.add(new HostCopy(c.dst, c.buffer, c.offset, c.bytes));
    }
    int last = first;
    long bytes = plan.unit(first).size();
    long copied = copyBytes[first];
    long mergeBytes = fromPeer ? Math.min(PEER_MERGE_BYTES, peerLane.window) : Math.min(MERGE_BYTES, direct.window);
    while (last + 1 < units && bytes < mergeBytes && state.get(last + 1) == PENDING && !run.isEmpty()) {
      HostCopy[] next = hostCopies(last + 1);
      HostCopy tail = run.get(run.size() - 1);
      if (next == FROM_STORE || next.length == 0 || next[0].buffer != tail.buffer
          || tail.dst + tail.bytes != next[0].dst || tail.offset + tail.bytes != next[0].offset) {
        break;
      }
      tail.bytes += next[0].bytes;
      for (int i = 1; i < next.length; i++) {
        run.add(new HostCopy(next[i].dst, next[i].buffer, next[i].offset, next[i].bytes));
      }
      last++;
      bytes += plan.unit(last).size();
      copied += copyBytes[last];
    }
    Lane lane = fromPeer ? peerLane : pickLane(copied, force);
    if (lane.link != null) {
      throughHelper(lane.link, run);
    } else {
      for (HostCopy c : run) {
        copy(lane.stream, c.dst, c.buffer, c.offset, c.bytes);
      }
    }
    if (fromPeer) {
      peerBytes += copied;
    } else {
      hostBytes += copied;
    }
    lane.bytes += copied;
    int[] queued = new int[last - first + 1];
    for (int u = first; u <= last; u++) {
      queued[u - first] = u;
    }
    recordQueued(lane, queued);
    return true;
  }

  /**
   * Under the lock: of the target's link and the helpers', the lane that would land {@code bytes} more first (what it
   * has outstanding plus them, over its rate), among those with room unless {@code force}; null when none has room.
   */
  private Lane pickLane(long bytes, boolean force) {
    long now = System.nanoTime();
    Lane best = null;
    double bestFinish = Double.MAX_VALUE;
    for (int i = -1; i < helperLanes.length; i++) {
      Lane lane = i < 0 ? direct : helperLanes[i];
      if (!force && !hasRoom(lane, now)) {
        continue;
      }
      double finish = (lane.outstanding() + bytes) / lane.rate;
      if (finish < bestFinish) {
        bestFinish = finish;
        best = lane;
      }
    }
    return best;
  }

  /**
   * Under the lock: whether {@code lane} may take more now: less than the window outstanding, and for a helper lent
   * at less than its whole link ({@link OnDemandOptions#helperShare()} below 1), no more queued than its share of the
   * link's measured rate since the restore began allows (plus a slot, or the window when smaller).
   */
  private boolean hasRoom(Lane lane, long now) {
    if (lane.outstanding() >= lane.window) {
      return false;
    }
    // The share paces a helper's host link; a relay of its memory does not use that link.
    if (lane.link == null || lane == peerLane || options.helperShare() >= 1 || Double.isNaN(lane.link.gbps())) {
      return true;
    }
    double allowed = lane.link.gbps() * options.helperShare() * (now - pacedFromNanos)
        + Math.min(lane.link.options().slotBytes(), options.windowBytes());
    return lane.queued < allowed;
  }

  /**
   * Under the lock: queues {@code run}'s copies (from host memory, or from the helper's own memory) into the helper's
   * ring on its stream, slot by slot, and each slot's pulls to the target behind them on the link's target stream,
   * where the run's event is then recorded.
   */
  private void throughHelper(HelperLink link, List<HostCopy> run) {
    HelperLink.Slot slot = link.begin();
    for (HostCopy c : run) {
      long done = 0;
      while (done < c.bytes) {
        if (slot.room() == 0) {
          copyCount += link.send(slot);
          slot = link.begin();
        }
        long n = Math.min(slot.room(), c.bytes - done);
        if (firstCopyNanos == 0) {
          firstCopyNanos = System.nanoTime();
        }
        if (c.buffer == null) {
          link.fillFromHelper(slot, c.dst + done, c.offset + done, n);
        } else {
          link.fill(slot, c.dst + done, c.buffer, c.offset + done, n);
        }
        copyCount++;
        done += n;
      }
    }
    copyCount += link.send(slot);
  }

  /** Under the lock: queues one copy on {@code on}, from host memory or (buffer null) from device address offset. */
  private void copy(GpuStream on, long dst, PinnedBuffer buffer, long offset, long bytes) {
    if (firstCopyNanos == 0) {
      firstCopyNanos = System.nanoTime();
    }
    if (buffer == null) {
      on.copyDeviceToDeviceAsync(dst, offset, bytes);
    } else {
      on.copyHostToDeviceAsync(dst, buffer, offset, bytes);
    }
    copyCount++;
  }

  /** Under the lock: the units' copies are on {@code lane}; one event, on the target, follows them. */
  private void recordQueued(Lane lane, int... queuedUnits) {
    if (firstQueuedNanos == 0) {
      firstQueuedNanos = System.nanoTime();
    }
    GpuEvent e = resources.takeEvent();
    used.add(e);
    lane.stream.record(e);
    long now = System.nanoTime();
    for (int unit : queuedUnits) {
      events[unit] = e;
      queuedNanos[unit] = now;
      lane.inFlight.add(unit);
      long size = plan.unit(unit).size();
      queuedBytes += size;
      lane.queued += size;
      state.set(unit, QUEUED);
    }
    lane.last = e;
    queued.signalAll();
  }

  /**
   * On the restore thread: makes sure {@code unit} (a store unit) is being read, reading ahead of it, and queues the
   * copies of what was read before it, in read order, until its own are queued.
   */
  private void stageFromStore(int unit) throws Exception {
    readAhead(unit);
    while (state.get(unit) == PENDING && !stopping) {
      if (assignedChunks[unit] < plan.unit(unit).chunks().size() && reading.size() < resources.staging().size()) {
        startBatch(unit, background);
      } else {
        queueOldestPart();
      }
    }
  }

  /**
   * On the restore thread: starts reading what comes next while the slots and {@link #READ_AHEAD_BYTES} allow, only
   * into staging already made: {@code unit} first, then the units a launch asked for, then (while streaming in the
   * background) the rest of the store units in plan order.
   */
  private void readAhead(int unit) {
    StagingRing ring = resources.staging();
    List<Integer> order = new ArrayList<>();
    order.add(unit);
    lock.lock();
    try {
      order.addAll(urgent);
    } finally {
      lock.unlock();
    }
    int i = 0;
    while (reading.size() < ring.size() && readingBytes() < READ_AHEAD_BYTES && ring.nextIsMade()) {
      int next = -1;
      while (i < order.size() && next < 0) {
        int u = order.get(i++);
        next = waitsForRead(u) ? u : -1;
      }
      if (next < 0 && background) {
        while (readCursor < units && !waitsForRead(readCursor)) {
          readCursor++;
        }
        next = readCursor < units ? readCursor : -1;
      }
      if (next < 0) {
        return;
      }
      startBatch(next, background);
    }
  }

  /** A pending store unit with chunks still to be read. */
  private boolean waitsForRead(int unit) {
    if (state.get(unit) != PENDING || assignedChunks[unit] == plan.unit(unit).chunks().size()) {
      return false;
    }
    lock.lock();
    try {
      return hostCopies(unit) == FROM_STORE;
    } finally {
      lock.unlock();
    }
  }

  private long readingBytes() {
    long bytes = 0;
    for (StoreBatch b : reading) {
      bytes += b.used;
    }
    return bytes;
  }

  /**
   * On the restore thread: takes the next staging slot and starts reading {@code unit}'s next chunks into it, and with
   * {@code fill} as many of the store units after it in plan order as the slot has room for.
   */
  private void startBatch(int unit, boolean fill) {
    StagingRing ring = resources.staging();
    int slot = ring.acquire();
    PinnedBuffer buffer;
    try {
      buffer = ring.buffer(slot);
    } catch (RuntimeException e) {
      ring.release(slot);
      throw e;
    }
    StoreBatch batch = new StoreBatch(slot, buffer);
    reading.add(batch);
    if (!addPart(batch, unit, false)) {
      ImageManifest.Chunk c = plan.unit(unit).chunks().get(assignedChunks[unit]);
      throw new ImageRestoreException("chunk of " + c.length() + " bytes in allocation '" + plan.unit(unit).name()
          + "' is larger than a staging buffer (" + ring.bytes() + " bytes)");
    }
    for (int u = unit + 1; fill && u < units && batch.used < ring.bytes(); u++) {
      if (assignedChunks[u] == 0 && waitsForRead(u) && !addPart(batch, u, true)) {
        break;
      }
    }
  }

  /**
   * Adds to {@code batch} as many of {@code unit}'s unread chunks as fit after what it holds (with {@code whole}, all
   * or none: a unit that fits a slot is not split, one copy each), and starts their reads; false if none were added.
   */
  private boolean addPart(StoreBatch batch, int unit, boolean whole) {
    ImageManifest.Allocation a = plan.unit(unit);
    List<ImageManifest.Chunk> chunks = a.chunks();
    int first = assignedChunks[unit];
    long from = chunks.get(first).offset();
    long at = (batch.used + PART_ALIGNMENT - 1) / PART_ALIGNMENT * PART_ALIGNMENT;
    long room = resources.staging().bytes() - at;
    int end = first;
    while (end < chunks.size() && chunks.get(end).offset() + chunks.get(end).length() - from <= room) {
      end++;
    }
    if (end == first || whole && end < chunks.size()) {
      return false;
    }
    long bytes = chunks.get(end - 1).offset() + chunks.get(end - 1).length() - from;
    List<Future<?>> reads = new ArrayList<>(end - first);
    PinnedBuffer staging = batch.buffer;
    for (int k = first; k < end; k++) {
      ImageManifest.Chunk c = chunks.get(k);
      int into = (int) (at + c.offset() - from);
      reads.add(resources.readers().submit(() -> VerifiedChunks.read(store, c.digest(),
          staging.slice(into, c.length()), "allocation '" + a.name() + "' at offset " + c.offset())));
    }
    batch.parts.add(new Part(unit, at, from, bytes, end == chunks.size(), reads));
    batch.used = at + bytes;
    assignedChunks[unit] = end;
    return true;
  }

  /**
   * On the restore thread: waits for the oldest unqueued part's reads (every chunk verified) and only then queues its
   * copy; the unit is queued with its last part, the slot handed back with the batch's last part.
   */
  private void queueOldestPart() throws Exception {
    StoreBatch batch = reading.peek();
    Part part = batch.parts.get(batch.queuedParts);
    Throwable failed = null;
    for (Future<?> f : part.reads()) {
      try {
        f.get();
      } catch (ExecutionException e) {
        failed = failed == null ? e.getCause() : failed;
      }
    }
    if (failed != null) {
      throw failed instanceof Exception x ? x : new IllegalStateException(failed);
    }
    ImageManifest.Allocation a = plan.unit(part.unit());
    lock.lock();
    try {
      // Verified above: only now may the bytes go to the device.
      List<HostCopy> copies = new ArrayList<>(1);
      addOutsideResident(copies, a.address() + part.from(), batch.buffer, part.at(), part.bytes());
      for (HostCopy c : copies) {
        copy(stream, c.dst, batch.buffer, c.offset, c.bytes);
      }
      batch.queuedParts++;
      if (part.last()) {
        storeBytes += copyBytes[part.unit()];
        direct.bytes += copyBytes[part.unit()];
        recordQueued(direct, part.unit());
      }
      if (batch.queuedParts == batch.parts.size()) {
        resources.staging().queued(batch.slot, stream);
      }
    } finally {
      lock.unlock();
    }
    if (batch.queuedParts == batch.parts.size()) {
      reading.poll();
      resources.staging().release(batch.slot);
    }
  }

  /**
   * On the restore thread, as it stops: waits for the reads still running (they write into the staging) and hands
   * every slot back, after the copies queued from it, so the ring can be lent again.
   */
  private void abandonReads() {
    for (StoreBatch batch : reading) {
      for (Part part : batch.parts) {
        for (Future<?> f : part.reads()) {
          try {
            f.get();
          } catch (Exception e) {
            // What stopped the restore is what it reports.
          }
        }
      }
      if (batch.queuedParts > 0) {
        lock.lock();
        try {
          resources.staging().queued(batch.slot, stream);
        } finally {
          lock.unlock();
        }
      }
      resources.staging().release(batch.slot);
    }
    reading.clear();
  }

  private void fail(Throwable t) {
    lock.lock();
    try {
      if (failure == null) {
        failure = t;
      }
      queued.signalAll();
    } finally {
      lock.unlock();
    }
    done.completeExceptionally(t);
  }

  /** @throws ImageRestoreException if the restore failed: no launch may run on what it left behind */
  void checkFailure() {
    Throwable t = failure;
    if (t != null) {
      if (t instanceof RuntimeException r) {
        throw new ImageRestoreException("the restore failed: " + r.getMessage(), r);
      }
      throw new ImageRestoreException("the restore failed: " + t, t);
    }
  }

  // ---- the restore's owner ----

  /** Completes when every unit is resident; fails with what stopped the restore. */
  CompletableFuture<Void> done() {
    return done;
  }

  /** Stops the restore thread and waits for queued copies (teardown only). Returns the events to the pool. */
  void stop() {
    stopping = true;
    if (pump != null) {
      try {
        pump.get(30, TimeUnit.SECONDS);
      } catch (Exception e) {
        // Its failure, if any, was recorded.
      }
    }
    RuntimeException failed = null;
    for (Lane lane : lanes) {
      try {
        if (lane.link == null) {
          lane.stream.synchronize();
        } else if (linksBorrowed) {
          lane.link.synchronize();
        }
      } catch (RuntimeException e) {
        failed = failed == null ? e : failed;
      }
    }
    giveBackLinks();
    lease.close();
    resources.giveBack(used);
    if (failed != null) {
      throw failed;
    }
  }

  /** Hands the borrowed links back to their owner, once. */
  private void giveBackLinks() {
    if (linksBorrowed) {
      linksBorrowed = false;
      for (Lane lane : borrowedLanes()) {
        lane.link.giveBack();
      }
    }
  }

  /** The lanes through a link: the helpers', and the peer lane when it relays. */
  private List<Lane> borrowedLanes() {
    List<Lane> out = new ArrayList<>(List.of(helperLanes));
    if (peerLane.link != null) {
      out.add(peerLane);
    }
    return out;
  }

  // ---- what reports read ----

  RestorePlan plan() {
    return plan;
  }

  long queuedNanos(int unit) {
    return queuedNanos[unit];
  }

  /** When the restore thread began its work; 0 before. */
  long pumpStartNanos() {
    return pumpStartNanos;
  }

  /** When the first copy call began (by either thread); 0 before. */
  long firstCopyNanos() {
    return firstCopyNanos;
  }

  /** When the first unit's copies were queued (by either thread), after them; 0 before. */
  long firstQueuedNanos() {
    return firstQueuedNanos;
  }

  SlabProtection protection() {
    return protection;
  }

  Stats stats() {
    lock.lock();
    try {
      long helped = 0;
      for (Lane lane : helperLanes) {
        helped += lane.bytes;
      }
      return new Stats(hostBytes, storeBytes, peerBytes, helped, copyCount, promotions);
    } finally {
      lock.unlock();
    }
  }

  /** Bytes each lane copied, by name ({@code direct}, {@code urgent}, {@code peer}, {@code device N}), in order. */
  Map<String, Long> laneBytes() {
    lock.lock();
    try {
      Map<String, Long> out = new LinkedHashMap<>();
      for (Lane lane : lanes) {
        out.merge(lane.name, lane.bytes, Long::sum);
      }
      return out;
    } finally {
      lock.unlock();
    }
  }

  /**
   * @param hostBytes device bytes copied from a host tier (over any link)
   * @param storeBytes device bytes read from the store, verified and copied
   * @param peerBytes device bytes copied from another GPU's memory (the node-wide HBM tier)
   * @param helperBytes of {@code hostBytes}, those that came through a helper's link
   * @param copies copies queued (through a helper: its host copies and its pulls)
   * @param promotions units a launch moved to the head
   */
  record Stats(long hostBytes, long storeBytes, long peerBytes, long helperBytes, int copies, int promotions) {}
}
