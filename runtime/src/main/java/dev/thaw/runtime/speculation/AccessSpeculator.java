package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.ParamLayout;
import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Derives the buffers a launch may touch from its raw parameter bytes (PhoenixOS's rule; on-demand restore may
 * start a launch only once it knows them, {@code docs/design/speculation.md}):
 * every 8-byte-aligned 8-byte value of the parameter buffer that lies inside a live allocation names that
 * allocation, struct parameters included. How each is touched comes from the kernel's PTX
 * ({@link PtxAccessAnalysis}): the kinds of the slots that name it, or'ed. A slot the analysis never saw used
 * as an address still names its allocation, as {@link AccessKind#READ}: the restore waits for it, which costs
 * nothing when the analysis is right and keeps the launch safe when it is not.
 *
 * <p>Cached: the PTX analysis per module, the slot plan per kernel (slot offsets and kinds), the allocation index
 * until {@link FunctionSession#allocationsVersion()} changes. A launch then costs a binary search per slot and
 * two small arrays. Not thread-safe: a session is used by one thread at a time, and so is its speculator.
 */
public final class AccessSpeculator {

  private final FunctionSession session;
  private final Map<String, PtxAccessAnalysis> modules = new HashMap<>();
  private final Map<KernelRef, Plan> plans = new HashMap<>();
  private KernelRef lastRef;
  private Plan lastPlan;
  private AllocationIndex index = AllocationIndex.EMPTY;
  private long indexVersion = -1;

  /** What is cached per kernel: which slots to look at and the kind each gives. */
  private record Plan(ParamLayout layout, int[] offsets, byte[] bits, PtxAccessAnalysis.EntryAccess analysis) {}

  public AccessSpeculator(FunctionSession session) {
    this.session = session;
  }

  /**
   * The speculated access set of launching {@code kernel} with {@code args}.
   *
   * @throws IllegalArgumentException if the session has no such module
   */
  public AccessSet speculate(KernelRef kernel, KernelArgs args) {
    Plan plan = plan(kernel, args.layout());
    AllocationIndex allocations = allocations();
    ByteBuffer slab = args.slab();
    int[] offsets = plan.offsets;
    int[] positions = new int[offsets.length];
    byte[] bits = new byte[offsets.length];
    int n = 0;
    for (int s = 0; s < offsets.length; s++) {
      int p = allocations.find(slab.getLong(offsets[s]));
      if (p < 0) {
        continue;
      }
      int b = plan.bits[s] == 0 ? 1 : plan.bits[s];
      int j = 0;
      while (j < n && positions[j] != p) {
        j++;
      }
      if (j == n) {
        positions[n] = p;
        bits[n++] = (byte) b;
      } else {
        bits[j] |= (byte) b;
      }
    }
    return new AccessSet(allocations, positions, bits, n);
  }

  /** The current allocation index, rebuilt only when the session's allocations changed. */
  public AllocationIndex allocations() {
    long v = session.allocationsVersion();
    if (v != indexVersion) {
      index = AllocationIndex.of(session.table().allocations());
      indexVersion = v;
    }
    return index;
  }

  /** What the PTX analysis found for {@code kernel}. */
  public PtxAccessAnalysis.EntryAccess analysis(KernelRef kernel) {
    PtxAccessAnalysis module = modules.computeIfAbsent(kernel.module(),
        m -> PtxAccessAnalysis.of(session.moduleRecord(m).ptx()));
    return module.entry(kernel.entry());
  }

  private Plan plan(KernelRef kernel, ParamLayout layout) {
    Plan p = lastPlan;
    if (kernel != lastRef || p.layout != layout) {
      p = plans.get(kernel);
      if (p == null || !p.layout.equals(layout)) {
        p = makePlan(kernel, layout);
        plans.put(kernel, p);
      }
      lastRef = kernel;
      lastPlan = p;
    }
    return p;
  }

  private Plan makePlan(KernelRef kernel, ParamLayout layout) {
    PtxAccessAnalysis.EntryAccess a = analysis(kernel);
    int slots = PtxAccessAnalysis.slotCount(layout.totalSize());
    if (a.layout().totalSize() != layout.totalSize()) {
      a = PtxAccessAnalysis.EntryAccess.conservative(kernel.entry(), layout, "the launch's parameter layout ("
          + layout.totalSize() + " bytes) differs from the PTX's (" + a.layout().totalSize() + " bytes)");
    }
    int[] offsets = new int[slots];
    byte[] bits = new byte[slots];
    for (int s = 0; s < slots; s++) {
      offsets[s] = 8 * s;
      bits[s] = a.slotBits(s);
    }
    return new Plan(layout, offsets, bits, a);
  }

  /** Kernels planned so far, for reports. */
  List<KernelRef> plannedKernels() {
    return List.copyOf(plans.keySet());
  }
}
