package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.LaunchInterceptor;
import dev.thaw.runtime.function.LaunchRedirect;
import dev.thaw.runtime.function.ModuleRecord;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.ptx.instrument.AccessOp;
import dev.thaw.runtime.ptx.instrument.AccessSite;
import dev.thaw.runtime.ptx.instrument.GuardTable;
import dev.thaw.runtime.ptx.instrument.GuardViolation;
import dev.thaw.runtime.ptx.instrument.InstrumentedModule;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import dev.thaw.runtime.ptx.instrument.ValidatingLauncher;
import dev.thaw.runtime.ptx.instrument.ViolationReport;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Profiling on a GPU: the same {@link AccessProfile} as {@link Profiler} makes on the sim device, with PTX
 * instrumentation as the validation, since a GPU kernel cannot be watched the way a Java kernel's checked views
 * are ({@code docs/design/ptx-instrumentation.md}).
 *
 * <p>At {@link #attach}, every module the session has loaded is instrumented ({@link PtxInstrumenter}) and the
 * result loaded into the session's context, outside the session (it is not part of the image); a module loaded
 * later is instrumented at its first launch. While attached, the session's interceptor is a {@link LaunchRedirect}:
 * each launch is speculated ({@link AccessSpeculator}) and runs as the instrumented kernel, with the plain kernel's
 * arguments and a guard table allowing exactly the speculated allocations with their kinds, synchronously
 * ({@link ValidatingLauncher}); the guard's violations are mapped to allocations and instructions
 * ({@link SiteViolation}). The instrumented kernel makes the same accesses, so outputs are those of a plain run.
 *
 * <p>A kernel is {@code exact} when every launch ran instrumented, completed and the guard counted no violation.
 * It is {@code unsafe} with the reasons otherwise: a violation, a fault, or a module that could not be
 * instrumented (its launches then run the plain kernel, unvalidated, and are never trusted).
 *
 * <p>The first-touch order is made of the speculated sets, in launch order ({@link
 * AccessProfile.OrderSource#SPECULATED}): the GPU reports only the accesses speculation missed, not every access,
 * so a buffer only an unsafe kernel reaches is not ordered (that kernel waits for full residency anyway).
 *
 * <p>Build-time only: every launch synchronizes its stream twice. Not thread-safe, like its session.
 */
public final class GpuProfiler implements AccessProfiler {

  /** Merged violations kept per launch; a wild kernel would otherwise list one per instruction and buffer. */
  static final int MAX_VIOLATIONS_PER_LAUNCH = 64;

  /** A module's instrumented twin as loaded, or why there is none. */
  private static final class Instrumented {
    final InstrumentedModule rewrite;
    final GpuModule module;
    final String failure;
    final Map<Integer, AccessSite> sites = new HashMap<>();
    final Map<String, Kernel> kernels = new HashMap<>();

    Instrumented(InstrumentedModule rewrite, GpuModule module, String failure) {
      this.rewrite = rewrite;
      this.module = module;
      this.failure = failure;
      if (rewrite != null) {
        rewrite.sites().forEach(s -> sites.put(s.id(), s));
      }
    }
  }

  private final FunctionSession session;
  private final AccessSpeculator speculator;
  private final LaunchInterceptor previous;
  private final ValidatingLauncher launcher;
  private final Map<String, Instrumented> modules = new LinkedHashMap<>();
  private final List<GpuLaunchCheck> checks = new ArrayList<>();
  private final Redirect redirect = new Redirect();
  private long sequence;
  private boolean closed;

  private GpuProfiler(FunctionSession session, LaunchInterceptor previous) {
    this.session = session;
    this.speculator = new AccessSpeculator(session);
    this.previous = previous;
    this.launcher = new ValidatingLauncher(session.context());
  }

  /**
   * Instruments the session's modules and starts profiling its launches, in front of the interceptor installed
   * now (which still sees every launch first).
   *
   * @throws IllegalArgumentException if the session runs on the sim device (there, {@link Profiler} is exact)
   * @throws IllegalStateException if the session's interceptor is already a {@link LaunchRedirect}
   */
  public static GpuProfiler attach(FunctionSession session) {
    if (session.context().recordsAccesses()) {
      throw new IllegalArgumentException("this session runs on the sim device, whose kernels ignore the guard: "
          + "profile it with Profiler (Profiling.attach picks the right one)");
    }
    return attachOnAnyDevice(session);
  }

  /**
   * {@link #attach} without the device check. On the sim device the instrumented kernels run their Java twins,
   * which ignore the guard, so no violation is ever reported: for testing everything else.
   */
  static GpuProfiler attachOnAnyDevice(FunctionSession session) {
    LaunchInterceptor previous = session.launchInterceptor();
    if (previous instanceof LaunchRedirect) {
      throw new IllegalStateException("the session's interceptor already runs launches itself (a LaunchRedirect); "
          + "GPU profiling cannot chain in front of it");
    }
    GpuProfiler p = new GpuProfiler(session, previous);
    try {
      for (ModuleRecord m : session.table().modules()) {
        p.instrumented(m.name());
      }
    } catch (RuntimeException e) {
      p.close();
      throw e;
    }
    session.setLaunchInterceptor(p.redirect);
    session.clearHostWrites();
    return p;
  }

  /** Invokes {@code function} once per sample with validation on and profiles what the invocations launched. */
  public static <S> AccessProfile profile(String image, ThawFunction<S> function, FunctionSession session,
      S state, List<FunctionRequest> samples) throws Exception {
    try (GpuProfiler p = attach(session)) {
      for (FunctionRequest r : samples) {
        function.invoke(session, state, r);
      }
      return p.finish(image);
    }
  }

  public AccessSpeculator speculator() {
    return speculator;
  }

  /** Every launch profiled so far, in launch order. */
  public List<GpuLaunchCheck> launches() {
    return List.copyOf(checks);
  }

  /** Why {@code module} could not be instrumented, or null when it was (or has not been seen yet). */
  public String instrumentationFailure(String module) {
    Instrumented m = modules.get(module);
    return m == null ? null : m.failure;
  }

  /** Waits for the session's stream and makes the profile of everything launched since {@link #attach}. */
  @Override
  public AccessProfile finish(String image) {
    try {
      session.synchronize();
    } catch (RuntimeException e) {
      // Instrumented launches are synchronous and record their own fault; this one came from a plain launch of
      // a module that could not be instrumented, whose kernels are unsafe already.
    }
    Set<String> order = new LinkedHashSet<>();
    // Writes are known only where every launch was validated exact: then each stayed inside its speculated kinds.
    Set<String> written = new TreeSet<>(session.hostWrites());
    boolean writesKnown = true;
    Map<KernelRef, List<GpuLaunchCheck>> byKernel = new LinkedHashMap<>();
    for (GpuLaunchCheck c : checks) {
      AccessSet set = c.speculated();
      writesKnown &= set != null && c.exact() && c.unchecked() == null;
      if (set != null) {
        for (int i = 0; i < set.size(); i++) {
          order.add(set.name(i));
          if (set.kind(i).writes()) {
            written.add(set.name(i));
          }
        }
      }
      byKernel.computeIfAbsent(c.kernel(), k -> new ArrayList<>()).add(c);
    }
    Map<String, AccessProfile.KernelProfile> kernels = new TreeMap<>();
    byKernel.forEach((kernel, launches) -> kernels.put(kernel.toString(), verdict(kernel, launches)));
    return new AccessProfile(AccessProfile.FORMAT_VERSION, image, AccessProfile.OrderSource.SPECULATED,
        checks.size(), List.copyOf(order), kernels, writesKnown ? List.copyOf(written) : null);
  }

  private AccessProfile.KernelProfile verdict(KernelRef kernel, List<GpuLaunchCheck> launches) {
    boolean exact = true;
    // Distinct reasons: a module that could not be instrumented gives every launch the same one.
    Set<String> distinct = new LinkedHashSet<>();
    for (GpuLaunchCheck c : launches) {
      exact &= c.exact();
      if (c.unchecked() != null) {
        distinct.add("not validated: " + c.unchecked());
      }
      if (c.fault() != null) {
        distinct.add(kernel + " launch " + c.launch() + " faulted: " + c.fault());
      }
      long shown = 0;
      for (SiteViolation v : c.violations()) {
        distinct.add(v.toString());
        shown += v.accesses();
      }
      if (c.violationCount() > shown) {
        distinct.add(kernel + " launch " + c.launch() + ": " + c.violationCount() + " violating accesses in all, "
            + shown + " of them listed");
      }
    }
    List<String> reasons = new ArrayList<>();
    for (String r : distinct) {
      if (reasons.size() == Profiler.MAX_REASONS) {
        reasons.add((distinct.size() - Profiler.MAX_REASONS) + " more");
        break;
      }
      reasons.add(r);
    }
    List<String> notes;
    try {
      notes = speculator.analysis(kernel).notes();
    } catch (RuntimeException e) {
      notes = List.of("no PTX analysis: " + e.getMessage());
    }
    if (!exact && reasons.isEmpty()) {
      reasons.add("a launch was not validated");
    }
    return new AccessProfile.KernelProfile(exact ? AccessProfile.Verdict.EXACT : AccessProfile.Verdict.UNSAFE,
        launches.size(), reasons, notes);
  }

  // ---- per launch ----

  private final class Redirect implements LaunchRedirect {
    @Override
    public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
        KernelArgs args) {
      if (previous != null) {
        previous.beforeLaunch(kernel, grid, block, sharedMemBytes, stream, args);
      }
    }

    @Override
    public boolean launchInstead(KernelRef kernel, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
        KernelArgs args) {
      return launch(kernel, grid, block, sharedMemBytes, stream, args);
    }
  }

  /** Runs one launch instrumented and records it; false (the plain kernel runs) when it cannot be instrumented. */
  private boolean launch(KernelRef ref, Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream,
      KernelArgs args) {
    long launch = sequence++;
    AccessSet set;
    try {
      set = speculator.speculate(ref, args);
    } catch (RuntimeException e) {
      checks.add(new GpuLaunchCheck(launch, ref, null, 0, List.of(), "no speculation: " + e.getMessage(), null));
      return false;
    }
    Instrumented module = instrumented(ref.module());
    String unchecked = module.failure;
    Kernel target = null;
    if (unchecked == null) {
      try {
        target = module.kernels.computeIfAbsent(ref.entry(), module.module::kernel);
        ValidatingLauncher.checkLayouts(args.layout(), target.params(), target.name());
      } catch (RuntimeException e) {
        unchecked = "the instrumented " + ref.entry() + " cannot take this launch: " + e.getMessage();
      }
    }
    if (unchecked != null) {
      checks.add(new GpuLaunchCheck(launch, ref, set, 0, List.of(), unchecked, null));
      return false;
    }
    ViolationReport report;
    try {
      report = launcher.launch(target, grid, block, sharedMemBytes, stream, args, allowed(set));
    } catch (RuntimeException e) {
      // A fault is sticky on a GPU: the function cannot go on, but the profile so far says which launch it was.
      checks.add(new GpuLaunchCheck(launch, ref, set, 0, List.of(), null, String.valueOf(e.getMessage())));
      throw e;
    }
    checks.add(new GpuLaunchCheck(launch, ref, set, report.total(),
        violations(ref, launch, set, report, module.sites), null, null));
    return true;
  }

  /** The guard table of a speculated set: each allocation as asked for (no padding), with its kind. */
  static GuardTable allowed(AccessSet set) {
    GuardTable.Builder b = GuardTable.builder();
    AllocationIndex index = set.allocations();
    for (int i = 0; i < set.size(); i++) {
      int p = set.position(i);
      b.allow(index.start(p), index.end(p) - index.start(p), set.kind(i).bits);
    }
    return b.build();
  }

  private Instrumented instrumented(String name) {
    Instrumented m = modules.get(name);
    if (m == null) {
      m = instrument(name);
      modules.put(name, m);
    }
    return m;
  }

  private Instrumented instrument(String name) {
    InstrumentedModule rewrite;
    try {
      rewrite = PtxInstrumenter.instrument(session.moduleRecord(name).ptx());
    } catch (RuntimeException e) {
      return new Instrumented(null, null, "module '" + name + "' cannot be instrumented: " + e.getMessage());
    }
    try {
      return new Instrumented(rewrite, session.context().loadPtx(rewrite.ptx()), null);
    } catch (RuntimeException e) {
      return new Instrumented(null, null, "the instrumented module '" + name + "' does not load: " + e.getMessage());
    }
  }

  // ---- what the guard reported, in allocations ----

  /** {@code gap}: for an unmapped part, the start of the next allocation, so that each gap is its own group. */
  private record Key(int position, long gap, Violation.Reason reason, AccessKind access, int site) {}

  private static final class Group {
    long start = Long.MAX_VALUE;
    long end = Long.MIN_VALUE;
    long accesses;
  }

  /** The part of one reported access that no speculated allocation allows: [start, end) in {@code position}. */
  private record Offending(long start, long end, int position, Violation.Reason reason) {}

  /**
   * Maps the guard's records to allocations and instructions, merged per instruction, allocation (or gap), reason
   * and kind, by address; at most {@link #MAX_VIOLATIONS_PER_LAUNCH}.
   */
  static List<SiteViolation> violations(KernelRef kernel, long launch, AccessSet set, ViolationReport report,
      Map<Integer, AccessSite> sites) {
    if (report.recorded().isEmpty()) {
      return List.of();
    }
    AllocationIndex index = set.allocations();
    Map<Key, Group> groups = new LinkedHashMap<>();
    for (GuardViolation v : report.recorded()) {
      int need = v.kind().mask();
      Offending o = offending(set, v.address(), v.size(), need);
      AccessKind access;
      if (need == AccessKind.READ_WRITE.bits && o.reason == Violation.Reason.WRONG_KIND) {
        // An atomic on a buffer speculated with one right: the one it lacked.
        access = set.kindAt(o.position).writes() ? AccessKind.READ : AccessKind.WRITE;
      } else {
        access = AccessKind.ofBits(need);
      }
      long gap = o.position < 0 ? index.nextStartAfter(o.start) : 0;
      Group g = groups.computeIfAbsent(new Key(o.position, gap, o.reason, access, v.site()), k -> new Group());
      g.start = Math.min(g.start, o.start);
      g.end = Math.max(g.end, o.end);
      g.accesses++;
    }
    List<SiteViolation> out = new ArrayList<>(groups.size());
    groups.forEach((k, g) -> {
      AccessSite site = sites.get(k.site);
      if (site == null) {
        site = new AccessSite(k.site, "?", 0, AccessOp.ofCode(
            k.access == AccessKind.READ_WRITE ? 3 : k.access.bits), false, "(no such site in the instrumented module)");
      }
      out.add(new SiteViolation(new Violation(kernel, launch, k.access, g.start, g.end - g.start,
          k.position < 0 ? null : index.name(k.position), k.reason), g.accesses, site));
    });
    out.sort(Comparator.comparingLong((SiteViolation s) -> s.violation().address())
        .thenComparingInt(s -> s.site().id()));
    return out.size() > MAX_VIOLATIONS_PER_LAUNCH ? List.copyOf(out.subList(0, MAX_VIOLATIONS_PER_LAUNCH)) : out;
  }

  /** Walks {@code [address, address + size)} allocation by allocation to the first part the set does not allow. */
  private static Offending offending(AccessSet set, long address, long size, int need) {
    AllocationIndex index = set.allocations();
    long a = address;
    long end = address + Math.max(size, 1);
    while (a < end) {
      int pos = index.find(a);
      if (pos < 0) {
        return new Offending(a, Math.min(end, index.nextStartAfter(a)), -1, Violation.Reason.UNMAPPED);
      }
      long stop = Math.min(end, index.end(pos));
      AccessKind kind = set.kindAt(pos);
      if (kind == null) {
        return new Offending(a, stop, pos, Violation.Reason.NOT_SPECULATED);
      }
      if ((kind.bits & need) != need) {
        return new Offending(a, stop, pos, Violation.Reason.WRONG_KIND);
      }
      a = stop;
    }
    return new Offending(address, end, index.find(address), Violation.Reason.SPANS_ALLOCATIONS);
  }

  /** Puts back the interceptor that was there before, unloads the instrumented modules and frees the guard. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    session.setLaunchInterceptor(previous);
    RuntimeException failure = null;
    List<AutoCloseable> all = new ArrayList<>();
    all.add(launcher);
    modules.values().stream().filter(m -> m.module != null).forEach(m -> all.add(m.module));
    for (AutoCloseable c : all) {
      try {
        c.close();
      } catch (Exception e) {
        failure = failure == null ? new IllegalStateException("closing the GPU profiler failed", e) : failure;
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}
