package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.sim.AccessLog;
import dev.thaw.runtime.gpu.sim.AddressRange;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Runs profiling invocations with validation on and turns what they did into an {@link AccessProfile}: the
 * first-touch order of allocations, from the accesses recorded on the sim device ({@link
 * AccessProfile.OrderSource#RECORDED}), and a verdict per kernel: {@code exact} when every launch stayed inside
 * its speculated set, {@code unsafe} with the reasons otherwise (a violation, or a launch that faulted).
 *
 * <p>Either {@link #profile} a function over sample requests, or {@link #attach} around work of your own and
 * {@link #finish} when it is done. On a GPU use {@link GpuProfiler}; {@link Profiling} picks the one the session's
 * device needs.
 */
public final class Profiler implements AccessProfiler {

  /** Reasons kept per unsafe kernel; the count of the rest is said in the last one. */
  static final int MAX_REASONS = 5;

  private final FunctionSession session;
  private final SimValidator validator;

  private Profiler(FunctionSession session, SimValidator validator) {
    this.session = session;
    this.validator = validator;
  }

  /**
   * Starts profiling {@code session}'s launches.
   *
   * @throws IllegalArgumentException if the session does not run on the sim device
   */
  public static Profiler attach(FunctionSession session) {
    Profiler p = new Profiler(session, SimValidator.attach(session));
    session.clearHostWrites();
    return p;
  }

  /** Invokes {@code function} once per sample with validation on and profiles what the invocations launched. */
  public static <S> AccessProfile profile(String image, ThawFunction<S> function, FunctionSession session,
      S state, List<FunctionRequest> samples) throws Exception {
    try (Profiler p = attach(session)) {
      for (FunctionRequest r : samples) {
        function.invoke(session, state, r);
      }
      return p.finish(image);
    }
  }

  public SimValidator validator() {
    return validator;
  }

  /** Waits for the session's stream and makes the profile of everything launched since {@link #attach}. */
  @Override
  public AccessProfile finish(String image) {
    try {
      session.synchronize();
    } catch (RuntimeException e) {
      // A faulted launch poisons the context; its record arrived before the fault and says so.
    }
    List<LaunchCheck> launches = new ArrayList<>(validator.launches());
    launches.sort((a, b) -> Long.compare(a.launch(), b.launch()));
    Set<String> order = new LinkedHashSet<>();
    Set<String> written = new TreeSet<>(session.hostWrites());
    Map<KernelRef, List<LaunchCheck>> byKernel = new LinkedHashMap<>();
    for (LaunchCheck c : launches) {
      order.addAll(touched(c));
      written.addAll(hit(c.speculated().allocations(), c.writes()));
      byKernel.computeIfAbsent(c.kernel(), k -> new ArrayList<>()).add(c);
    }
    Map<String, AccessProfile.KernelProfile> kernels = new TreeMap<>();
    byKernel.forEach((kernel, checks) -> kernels.put(kernel.toString(), verdict(kernel, checks)));
    return new AccessProfile(AccessProfile.FORMAT_VERSION, image, AccessProfile.OrderSource.RECORDED,
        launches.size(), List.copyOf(order), kernels, List.copyOf(written));
  }

  private AccessProfile.KernelProfile verdict(KernelRef kernel, List<LaunchCheck> checks) {
    List<String> reasons = new ArrayList<>();
    long problems = 0;
    for (LaunchCheck c : checks) {
      if (c.fault() != null) {
        problems++;
        if (reasons.size() < MAX_REASONS) {
          reasons.add("launch " + c.launch() + " faulted: " + c.fault());
        }
      }
      for (Violation v : c.violations()) {
        problems++;
        if (reasons.size() < MAX_REASONS) {
          reasons.add(v.toString());
        }
      }
    }
    if (problems > reasons.size()) {
      reasons.add((problems - reasons.size()) + " more");
    }
    List<String> notes;
    try {
      notes = validator.speculator().analysis(kernel).notes();
    } catch (RuntimeException e) {
      notes = List.of("no PTX analysis: " + e.getMessage());
    }
    return new AccessProfile.KernelProfile(problems == 0 ? AccessProfile.Verdict.EXACT
        : AccessProfile.Verdict.UNSAFE, checks.size(), reasons, notes);
  }

  /** The names of the allocations {@code log}'s ranges fall in. */
  private static Set<String> hit(AllocationIndex index, AccessLog log) {
    Set<String> out = new LinkedHashSet<>();
    for (AddressRange r : log.ranges()) {
      long a = r.start();
      while (a < r.end()) {
        int pos = index.find(a);
        if (pos < 0) {
          a = Math.min(r.end(), index.nextStartAfter(a));
        } else {
          out.add(index.name(pos));
          a = Math.min(r.end(), index.end(pos));
        }
      }
    }
    return out;
  }

  /** The allocations a launch touched: those of its speculated set in slot order, then the others by address. */
  private static List<String> touched(LaunchCheck c) {
    AllocationIndex index = c.speculated().allocations();
    Set<Integer> hit = new LinkedHashSet<>();
    for (AccessLog log : List.of(c.reads(), c.writes())) {
      for (AddressRange r : log.ranges()) {
        long a = r.start();
        while (a < r.end()) {
          int pos = index.find(a);
          if (pos < 0) {
            a = Math.min(r.end(), index.nextStartAfter(a));
          } else {
            hit.add(pos);
            a = Math.min(r.end(), index.end(pos));
          }
        }
      }
    }
    List<String> out = new ArrayList<>();
    for (int i = 0; i < c.speculated().size(); i++) {
      if (hit.remove(c.speculated().position(i))) {
        out.add(c.speculated().name(i));
      }
    }
    hit.stream().sorted().forEach(p -> out.add(index.name(p)));
    return out;
  }

  @Override
  public void close() {
    validator.close();
  }
}
