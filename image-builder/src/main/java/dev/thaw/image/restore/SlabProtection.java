package dev.thaw.image.restore;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntPredicate;

/**
 * Makes an on-demand restore's read-only slabs read-only on the device ({@code cuMemSetAccess} with
 * {@code PROT_READ}) as soon as the last restore copy into each has landed: from then on a kernel store (or a copy)
 * into a buffer the profile called read-only faults, instead of changing weights that may outlive the instance on
 * the device (the HBM tier hands them to the next worker).
 *
 * <p>Invariant: a slab is protected only after every unit (allocation) with bytes in it is resident, i.e. after the
 * events recorded behind all of their copies have completed; a copy engine never writes into a mapping made
 * read-only. Slabs already read-only (imported from the HBM tier) are left as they are; a slab no copy goes into is
 * protected at once. Protection runs on the restore thread, never on the launching one: it adds nothing to the path
 * of the first launch.
 *
 * <p>A slab is still writable while its copies stream in, so a launch that stores into it then is not refused. The
 * {@link ResidencyGate} notes, per kernel and parameter slot, the slabs a launch's arguments pointed into while they
 * were writable ({@link #open}, {@link #writableTouching}); {@link OnDemandRestore#mayHaveBeenWritten()} later asks
 * the PTX analysis whether the kernel may store through those slots. Such a slab is never handed to the HBM tier.
 *
 * <p>Used by the one {@link Residency} under its lock ({@link #landed}, {@link #takeReady}); {@link #protect} runs
 * outside it, on the restore thread; the gate's queries read volatile state from the launching thread.
 */
final class SlabProtection {

  private final Mapping[] slabs;
  private final long[] slabStarts;
  private final long[] slabEnds;
  /** Per slab, the units with bytes in it not resident yet. */
  private final int[] waiting;
  /** Per unit, the slabs it has bytes in (most units: none); made by {@link #start}. */
  private int[][] slabsOf = new int[0][];
  private final List<Integer> ready = new ArrayList<>();
  /** Bit {@code i} (slabs past 63 share bit 63): slab {@code i} is not protected yet. Read by the launching thread. */
  private volatile long writable;
  private int protectedSlabs;
  private long protectedBytes;
  private long protectNanos;
  /** Why the device refused to make a slab read-only, or null. */
  private String refused;

  /** The protection of {@code session}'s read-only slabs that are not read-only yet: a copy of a short list. */
  SlabProtection(FunctionSession session) {
    List<FunctionSession.MappedSlab> open = new ArrayList<>();
    for (FunctionSession.MappedSlab s : session.slabs()) {
      if (s.slab().readOnly() && s.mapping().access() != MemoryAccess.READ) {
        open.add(s);
      }
    }
    slabs = new Mapping[open.size()];
    slabStarts = new long[open.size()];
    slabEnds = new long[open.size()];
    waiting = new int[open.size()];
    long all = 0;
    for (int i = 0; i < slabs.length; i++) {
      slabs[i] = open.get(i).mapping();
      slabStarts[i] = open.get(i).slab().address();
      slabEnds[i] = open.get(i).slab().end();
      all |= bit(i);
    }
    writable = all;
  }

  private static long bit(int slab) {
    return 1L << Math.min(slab, 63);
  }

  /** True while some read-only slab is still writable: one volatile read. */
  boolean open() {
    return writable != 0;
  }

  /** The writable read-only slabs (a mask, as {@link #slabsIn}) that {@code [start, end)} overlaps. */
  long writableTouching(long start, long end) {
    long w = writable;
    long out = 0;
    for (int i = 0; i < slabStarts.length && w != 0; i++) {
      if ((w & bit(i)) != 0 && start < slabEnds[i] && end > slabStarts[i]) {
        out |= bit(i);
      }
    }
    return out;
  }

  /** The writable read-only slabs, as a mask. */
  long writableMask() {
    return writable;
  }

  /** The start addresses of the slabs in {@code mask}; bit 63 stands for every slab from the 64th on. */
  List<Long> slabsIn(long mask) {
    List<Long> out = new ArrayList<>();
    for (int i = 0; i < slabStarts.length; i++) {
      if ((mask & bit(i)) != 0) {
        out.add(slabStarts[i]);
      }
    }
    return out;
  }

  /**
   * On the restore thread, under the residency's lock, before the first {@link #landed}: which units have bytes in
   * which slab. A slab none of whose units is still to come is ready at once.
   *
   * @param residentAtStart the units no copy goes to (resident from the start)
   */
  void start(RestorePlan plan, IntPredicate residentAtStart) {
    if (slabs.length == 0) {
      return;
    }
    int units = plan.unitCount();
    slabsOf = new int[units][];
    int[] in = new int[slabs.length];
    for (int u = 0; u < units; u++) {
      if (residentAtStart.test(u)) {
        continue;
      }
      long start = plan.unit(u).address();
      long end = start + plan.unit(u).size();
      int n = 0;
      for (int i = 0; i < slabs.length; i++) {
        if (start < slabEnds[i] && end > slabStarts[i]) {
          in[n++] = i;
          waiting[i]++;
        }
      }
      slabsOf[u] = n == 0 ? null : java.util.Arrays.copyOf(in, n);
    }
    for (int i = 0; i < slabs.length; i++) {
      if (waiting[i] == 0) {
        ready.add(i);
      }
    }
  }

  /** Under the residency's lock: {@code unit} is resident; a slab whose last unit it was is ready. */
  void landed(int unit) {
    int[] in = slabsOf.length == 0 ? null : slabsOf[unit];
    if (in == null) {
      return;
    }
    for (int i : in) {
      if (--waiting[i] == 0) {
        ready.add(i);
      }
    }
  }

  /** Under the residency's lock: the slabs ready to protect since the last call, or null when none are. */
  int[] takeReady() {
    if (ready.isEmpty()) {
      return null;
    }
    int[] out = ready.stream().mapToInt(Integer::intValue).toArray();
    ready.clear();
    return out;
  }

  /**
   * On the restore thread, outside the lock: makes the slabs read-only. A device that refuses (a non-sticky error)
   * leaves the slab writable, which is said once on stderr and in {@link #stats()}: the function serves unprotected,
   * and the slab is never handed to the HBM tier (only read-only mappings are). A sticky error fails the restore.
   */
  void protect(int[] which) {
    for (int i : which) {
      long t = System.nanoTime();
      try {
        slabs[i].setAccess(MemoryAccess.READ);
      } catch (dev.thaw.runtime.gpu.CudaException e) {
        if (e.isSticky()) {
          throw e;
        }
        synchronized (this) {
          if (refused == null) {
            System.err.println("thaw: read-only slab at 0x" + Long.toHexString(slabStarts[i]) + " left writable: "
                + e.getMessage());
          }
          refused = e.getMessage();
        }
        continue;
      }
      long spent = System.nanoTime() - t;
      synchronized (this) {
        if (i < 63 || allProtectedFrom63(i)) {
          writable &= ~bit(i);
        }
        protectedSlabs++;
        protectedBytes += slabEnds[i] - slabStarts[i];
        protectNanos += spent;
      }
    }
  }

  /** Under this monitor: whether every slab from the 64th on is protected once slab {@code i} is. */
  private boolean allProtectedFrom63(int i) {
    for (int j = 63; j < slabs.length; j++) {
      if (j != i && slabs[j].access() != MemoryAccess.READ) {
        return false;
      }
    }
    return true;
  }

  /** What was protected so far. */
  synchronized OnDemandRestore.Protection stats() {
    return new OnDemandRestore.Protection(protectedSlabs, slabs.length, protectedBytes, protectNanos / 1e6, refused);
  }
}
