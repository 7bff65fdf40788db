package dev.thaw.image.restore;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.ArrayList;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Makes an on-demand restore's read-only slabs read-only on the device ({@code cuMemSetAccess} with
 * {@code PROT_READ}), so that from then on a kernel store (or a copy) into a buffer the profile called read-only
 * faults, instead of changing weights that may outlive the instance on the device (the HBM tier hands them to the
 * next worker).
 *
 * <p>Invariant: {@link #protectAll} runs only when no work of the context can be touching a slab: every restore copy
 * has completed (the restore is resident: the events recorded behind all copies have completed), no request of the
 * function runs (its owner calls it between requests: {@link OnDemandRestore#protectReadOnlySlabs}), and the context
 * has been synchronized. The driver neither refuses nor waits for work in flight when a mapping's access changes
 * ({@code cuMemSetAccess} returns while a copy into the range is queued, and the copy then fails), and changing it
 * under a request's kernels faults them ({@code
 * docs/design/memory-tiers.md}, "Write protection"). Slabs already read-only (imported from the HBM tier) are left as
 * they are.
 *
 * <p>Until then the slabs are writable, so a launch that stores into one is not refused. The {@link ResidencyGate}
 * notes, per kernel and parameter slot, the slabs a launch's arguments pointed into while they were writable ({@link
 * #open}, {@link #writableTouching}); {@link OnDemandRestore#mayHaveBeenWritten()} later asks the PTX analysis whether
 * the kernel may store through those slots. Such a slab is never handed to the HBM tier.
 *
 * <p>The gate's queries read volatile state from the launching thread; {@link #protectAll} runs on the owner's thread
 * while the function is idle.
 */
final class SlabProtection {

  private static final Logger LOG = LoggerFactory.getLogger(SlabProtection.class);

  private final Mapping[] slabs;
  private final long[] slabStarts;
  private final long[] slabEnds;
  /**
   * Bit {@code i} (slabs past 63 share bit 63): slab {@code i} is writable and protection has not been tried yet.
   * Read by the launching thread.
   */
  private volatile long writable;
  private boolean tried;
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
    long all = 0;
    for (int i = 0; i < slabs.length; i++) {
      slabs[i] = open.get(i).mapping();
      slabStarts[i] = open.get(i).slab().address();
      slabEnds[i] = open.get(i).slab().end();
      all |= bit(i);
    }
    writable = all;
    tried = slabs.length == 0;
  }

  private static long bit(int slab) {
    return 1L << Math.min(slab, 63);
  }

  /** True while some read-only slab is still writable and not tried: one volatile read. */
  boolean open() {
    return writable != 0;
  }

  /** True once {@link #protectAll} ran (or there was nothing to protect). */
  synchronized boolean tried() {
    return tried;
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
   * Makes every slab read-only, once; later calls do nothing. Call it only as the class's invariant says. A device
   * that refuses (a non-sticky error) leaves that slab writable, which is said once on stderr and in {@link #stats()}:
   * the function serves unprotected, and the slab is never handed to the HBM tier (only read-only mappings are). A
   * sticky error is thrown: the context is lost.
   */
  synchronized void protectAll() {
    if (tried) {
      return;
    }
    tried = true;
    try {
      for (int i = 0; i < slabs.length; i++) {
        long t = System.nanoTime();
        try {
          slabs[i].setAccess(MemoryAccess.READ);
        } catch (CudaException e) {
          if (e.isSticky()) {
            throw e;
          }
          if (refused == null) {
            LOG.warn("Read-only slab at 0x{} left writable: {}", Long.toHexString(slabStarts[i]), e.getMessage());
          }
          refused = e.getMessage();
          continue;
        }
        protectNanos += System.nanoTime() - t;
        protectedSlabs++;
        protectedBytes += slabEnds[i] - slabStarts[i];
      }
    } finally {
      // Tried: a slab left writable is never handed on (its mapping is not READ), so launches stop noting.
      writable = 0;
    }
  }

  /** What was protected so far. */
  synchronized OnDemandRestore.Protection stats() {
    return new OnDemandRestore.Protection(protectedSlabs, slabs.length, protectedBytes, protectNanos / 1e6, refused);
  }
}
