package dev.thaw.image.restore;

import dev.thaw.runtime.function.CopyInterceptor;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.speculation.AccessKind;
import dev.thaw.runtime.speculation.AccessSpeculator;
import dev.thaw.runtime.speculation.AllocationIndex;
import dev.thaw.runtime.speculation.PtxAccessAnalysis;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Gates a restored session's device work on residency: installed as the session's
 * {@link CopyInterceptor}, it makes the launching stream wait ({@code cuStreamWaitEvent}) for every allocation a
 * launch may touch that is not resident yet, and never blocks the launching thread on a copy.
 *
 * <p>A launch of a kernel profiled {@code exact} may touch only the allocations its parameter bytes point into
 * (every 8-byte slot, the speculation rule of {@link AccessSpeculator}); each pending one
 * is promoted to the head of the restore, and the stream waits for each not yet resident. Any other kernel waits for
 * full residency. The session's own downloads, device copies and fills wait for the ranges they touch; its uploads,
 * while the restore runs, are staged in pinned memory and queued on the stream behind those waits, so a restore copy
 * can never land on top of them.
 *
 * <p>While a read-only slab is still writable (until the function's owner protects it, idle, after full residency;
 * {@link SlabProtection}), the gate also notes, per kernel and parameter slot, which such slabs a launch's arguments
 * pointed into, and which the session's own uploads, copies, fills and downloads touched: {@link #mayHaveWritten} says
 * afterwards which slabs could have been written before they were protected. A bit-or per named allocation; nothing
 * allocated after a kernel's first launch.
 *
 * <p>Per launch, once a kernel is seen: a map lookup, a binary search per parameter slot, and a wait per allocation
 * the session's stream has not waited for yet (each at most once: later work on the stream is ordered after it).
 * After full residency and until the slabs are protected, the binary searches without the waits; after that, two
 * volatile reads. Used by the session's one thread.
 */
final class ResidencyGate implements CopyInterceptor {

  /** What is cached per kernel, and the writable read-only slabs its launches named, per parameter slot. */
  private static final class KernelGate {
    final boolean onArguments;
    /** Per parameter slot, a mask of {@link SlabProtection} slabs; null until one is noted. */
    long[] slotSlabs;
    /** Slabs writable when a launch not gated on its arguments was queued: it may touch anything. */
    long anySlabs;

    KernelGate(boolean onArguments) {
      this.onArguments = onArguments;
    }

    void note(int slot, long slabs) {
      if (slotSlabs == null || slotSlabs.length <= slot) {
        slotSlabs = Arrays.copyOf(slotSlabs == null ? new long[0] : slotSlabs, slot + 1);
      }
      slotSlabs[slot] |= slabs;
    }
  }

  private final FunctionSession session;
  private final RestorePlan plan;
  private final Residency residency;
  private final GpuStream home;
  private final PinnedBuffer arena;
  private final RestoreTrace trace;
  private final SlabProtection protection;
  /** Writable read-only slabs the session's own uploads, copies, fills and downloads touched. */
  private long sessionAccessSlabs;
  private final boolean[] homeWaited;
  private final Map<KernelRef, KernelGate> kernels = new HashMap<>();
  private final List<PinnedBuffer> overflow = new ArrayList<>();
  private KernelRef lastKernel;
  private KernelGate lastGate;
  private AllocationIndex index;
  private int[] unitAt;
  private long indexVersion = -1;
  private boolean homeWaitedAll;
  private long arenaUsed;
  private GpuEvent lastUpload;
  private GpuEvent lastHomeWait;
  private long waits;
  private long fullWaits;
  private long stagedUploads;

  ResidencyGate(FunctionSession session, RestorePlan plan, Residency residency, PinnedBuffer arena, RestoreTrace trace) {
    this.protection = residency.protection();
    this.session = session;
    this.plan = plan;
    this.residency = residency;
    this.home = session.stream();
    this.arena = arena;
    this.trace = trace;
    this.homeWaited = new boolean[plan.unitCount()];
  }

  // ---- launches ----

  @Override
  public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args) {
    if (trace != null) {
      trace.beforeWaits(stream);
    }
    if (!residency.isComplete()) {
      residency.checkFailure();
      KernelGate g = kernel == lastKernel ? lastGate : gate(kernel);
      if (g.onArguments) {
        waitForArguments(g, args, stream);
      } else {
        if (protection.open()) {
          g.anySlabs |= protection.writableMask();
        }
        waitForAll(stream);
      }
    } else if (protection.open()) {
      // Resident, not protected yet (that waits until the function is idle): still note what the launch names.
      noteArguments(kernel == lastKernel ? lastGate : gate(kernel), args);
    }
    if (trace != null) {
      trace.launching(kernel, stream);
    }
  }

  /** After full residency, while a read-only slab is writable: {@link #waitForArguments}'s notes, with no wait. */
  private void noteArguments(KernelGate g, KernelArgs args) {
    if (!g.onArguments) {
      g.anySlabs |= protection.writableMask();
      return;
    }
    refreshIndex();
    ByteBuffer slab = args.slab();
    int slots = (args.layout().totalSize() + 7) / 8;
    int readable = slab.capacity() / 8;
    for (int s = 0, n = Math.min(slots, readable); s < n; s++) {
      int p = index.find(slab.getLong(8 * s));
      if (p >= 0) {
        long touched = protection.writableTouching(index.start(p), index.end(p));
        if (touched != 0) {
          g.note(s, touched);
        }
      }
    }
  }

  private KernelGate gate(KernelRef kernel) {
    KernelGate g = kernels.get(kernel);
    if (g == null) {
      g = new KernelGate(plan.gatesOnArguments(kernel.toString()));
      kernels.put(kernel, g);
    }
    lastKernel = kernel;
    lastGate = g;
    return g;
  }

  private void waitForArguments(KernelGate g, KernelArgs args, GpuStream stream) {
    refreshIndex();
    ByteBuffer slab = args.slab();
    int slots = (args.layout().totalSize() + 7) / 8;
    int readable = slab.capacity() / 8;
    boolean watch = protection.open();
    for (int s = 0, n = Math.min(slots, readable); s < n; s++) {
      int p = index.find(slab.getLong(8 * s));
      if (p >= 0 && unitAt[p] >= 0) {
        if (watch) {
          long touched = protection.writableTouching(index.start(p), index.end(p));
          if (touched != 0) {
            g.note(s, touched);
          }
        }
        waitForUnit(unitAt[p], stream);
      }
    }
  }

  private void waitForUnit(int unit, GpuStream stream) {
    boolean onHome = stream == home;
    if (onHome && (homeWaitedAll || homeWaited[unit])) {
      return;
    }
    int st = residency.state(unit);
    if (st != Residency.RESIDENT) {
      if (st == Residency.PENDING) {
        residency.promote(unit);
      }
      GpuEvent e = residency.event(unit);
      // A run of allocations copied as one shares its event: one wait covers them all.
      if (!onHome || e != lastHomeWait) {
        stream.waitFor(e);
        waits++;
        if (onHome) {
          lastHomeWait = e;
        }
        if (trace != null) {
          trace.waited(plan.unit(unit).name());
        }
      }
    }
    if (onHome) {
      homeWaited[unit] = true;
    }
  }

  private void waitForAll(GpuStream stream) {
    if (stream == home && homeWaitedAll) {
      return;
    }
    GpuEvent[] all = residency.promoteAll();
    for (GpuEvent e : all) {
      stream.waitFor(e);
    }
    if (all.length > 0) {
      fullWaits++;
      if (trace != null) {
        trace.waited("full residency");
      }
    }
    if (stream == home) {
      homeWaitedAll = true;
    }
  }

  /** The session's allocations by address, each with its restore unit (-1 for one the image does not have). */
  private void refreshIndex() {
    long v = session.allocationsVersion();
    if (v == indexVersion) {
      return;
    }
    index = AllocationIndex.of(session.table().allocations());
    unitAt = new int[index.size()];
    for (int p = 0; p < unitAt.length; p++) {
      int u = plan.unitOf(index.name(p));
      // An allocation made after the restore, or one of another size, holds nothing of the image.
      unitAt[p] = u >= 0 && plan.unit(u).address() == index.start(p) ? u : -1;
    }
    indexVersion = v;
  }

  // ---- the session's own copies ----

  @Override
  public void beforeDeviceAccess(long address, long bytes, GpuStream stream) {
    if (bytes <= 0) {
      return;
    }
    if (protection.open()) {
      // Reads and writes alike: the hook does not say which (a download only reads; taken as a write all the same).
      sessionAccessSlabs |= protection.writableTouching(address, address + bytes);
    }
    if (residency.isComplete()) {
      return;
    }
    residency.checkFailure();
    refreshIndex();
    long end = address + bytes;
    for (long at = address; at < end; ) {
      int p = index.find(at);
      if (p < 0) {
        at = index.nextStartAfter(at);
        continue;
      }
      if (unitAt[p] >= 0) {
        waitForUnit(unitAt[p], stream);
      }
      at = index.end(p);
    }
  }

  @Override
  public boolean uploadInstead(long dstDevice, ByteBuffer src, GpuStream stream) {
    if (residency.isComplete() && (lastUpload == null || lastUpload.isComplete())) {
      // Nothing left to land on the upload, and no staged upload still queued that it could overtake.
      return false;
    }
    int n = src.remaining();
    beforeDeviceAccess(dstDevice, n, stream);
    PinnedBuffer buffer;
    long offset;
    if (arenaUsed + n <= arena.size()) {
      buffer = arena;
      offset = arenaUsed;
      arenaUsed += (n + 255) & ~255L;
    } else {
      buffer = session.context().allocatePinned(Math.max(n, 1));
      overflow.add(buffer);
      offset = 0;
    }
    if (n > 0) {
      buffer.slice(offset, n).put(src.duplicate());
      stream.copyHostToDeviceAsync(dstDevice, buffer, offset, n);
    }
    if (lastUpload == null) {
      lastUpload = session.context().createEvent(false);
    }
    lastUpload.record(stream);
    stagedUploads++;
    return true;
  }

  // ---- what export asks ----

  /**
   * The start addresses of the read-only slabs a launch or the session's own device access may have written while
   * they were still writable: a launch whose argument slot pointed into one, where the kernel's PTX may store through
   * that slot; a launch not gated on its arguments; an upload, copy, fill or download that touched one. Off the
   * request path: it reads the modules' PTX (once per kernel noted). Call it with the session idle.
   */
  List<Long> mayHaveWritten() {
    long mask = sessionAccessSlabs;
    AccessSpeculator speculator = null;
    for (Map.Entry<KernelRef, KernelGate> e : kernels.entrySet()) {
      KernelGate g = e.getValue();
      mask |= g.anySlabs;
      if (g.slotSlabs == null) {
        continue;
      }
      if (speculator == null) {
        speculator = new AccessSpeculator(session);
      }
      PtxAccessAnalysis.EntryAccess a = speculator.analysis(e.getKey());
      for (int s = 0; s < g.slotSlabs.length; s++) {
        if (g.slotSlabs[s] == 0) {
          continue;
        }
        // Past the PTX's parameters, or a slot the analysis could not follow: taken as written.
        AccessKind kind = s < a.slotCount() ? a.slotKind(s)
            : AccessKind.READ_WRITE;
        if (kind != null && kind.writes()) {
          mask |= g.slotSlabs[s];
        }
      }
    }
    return protection.slabsIn(mask);
  }

  // ---- what the validating mode asks ----

  /**
   * True when a launch on {@code stream} now may touch the allocation at {@code position} of {@link #index()}: it is
   * not one of the image's, or it is resident, or {@code stream} waits for it.
   */
  boolean allowed(int position, GpuStream stream) {
    int u = unitAt[position];
    if (u < 0 || residency.isComplete() || residency.state(u) == Residency.RESIDENT) {
      return true;
    }
    return stream == home && (homeWaitedAll || homeWaited[u]);
  }

  /** The session's allocations by address, current. */
  AllocationIndex index() {
    refreshIndex();
    return index;
  }

  // ---- reports and teardown ----

  /** Waits queued, waits for full residency, uploads staged. */
  long[] counts() {
    return new long[] {waits, fullWaits, stagedUploads};
  }

  /** Frees what staged uploads used; the stream must be idle (the restore is being closed). */
  void close() {
    overflow.forEach(PinnedBuffer::close);
    overflow.clear();
    if (lastUpload != null) {
      lastUpload.close();
    }
    arenaUsed = 0;
  }
}
