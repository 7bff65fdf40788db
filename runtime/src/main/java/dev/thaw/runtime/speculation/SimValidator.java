package dev.thaw.runtime.speculation;

import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.function.LaunchInterceptor;
import dev.thaw.runtime.function.LaunchRedirect;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.sim.AccessLog;
import dev.thaw.runtime.gpu.sim.AddressRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * Validates speculation on the sim device, exactly (Java kernels touch memory only through views that record every
 * range they read and write): every launch of the session is speculated
 * before it is submitted (a {@link LaunchInterceptor}), and what it really read and wrote (a
 * {@link SimContext#addLaunchListener launch listener}) is compared with that set. A byte read or written outside
 * every speculated buffer, or written in a buffer speculated read-only (read in one speculated write-only), is a
 * {@link Violation}.
 *
 * <p>Interceptor and listener records are paired per stream in launch order: a launch record is matched with the
 * oldest pending speculation, on any stream, of the same kernel with the same parameter bytes (the listener is
 * not told the stream; identical launches have identical sets, so a tie is harmless). Pending speculations
 * passed over were never run (the launch was refused after the interceptor) and are dropped. A record with no
 * speculation (a launch not made through the session) is kept in {@link #unmatched()}.
 *
 * <p>Results arrive on the streams' workers: read them after the session's stream is synchronized. Closing
 * detaches both hooks and puts back the interceptor that was there before. Thread-safe.
 */
public final class SimValidator implements AutoCloseable {

  /** Violations kept per launch; a wild kernel would otherwise list one per allocation it sprays. */
  static final int MAX_VIOLATIONS_PER_LAUNCH = 64;

  private record Pending(long launch, KernelRef kernel, byte[] args, AccessSet set) {}

  private final FunctionSession session;
  private final SimContext context;
  private final AccessSpeculator speculator;
  private final LaunchInterceptor previous;
  private final Consumer<SimLaunchRecord> listener = this::onLaunch;
  private final Map<GpuStream, ArrayDeque<Pending>> pending = new IdentityHashMap<>();
  private final List<LaunchCheck> checks = new ArrayList<>();
  private final List<String> unmatched = new ArrayList<>();
  private long sequence;
  private boolean closed;

  private SimValidator(FunctionSession session, SimContext context, AccessSpeculator speculator) {
    this.session = session;
    this.context = context;
    this.speculator = speculator;
    this.previous = session.launchInterceptor();
  }

  /** Validates every later launch of {@code session}, which must run on the sim device. */
  public static SimValidator attach(FunctionSession session) {
    return attach(session, new AccessSpeculator(session));
  }

  /**
   * Validates every later launch of {@code session} with {@code speculator}'s sets.
   *
   * @throws IllegalArgumentException if the session's context is not a sim context (on a GPU, validation is
   *     PTX instrumentation)
   * @throws IllegalStateException if the session's interceptor is a {@link LaunchRedirect}
   */
  public static SimValidator attach(FunctionSession session, AccessSpeculator speculator) {
    if (!(session.context() instanceof SimContext sim)) {
      throw new IllegalArgumentException("exact validation needs the sim device; this session runs on "
          + session.context().device().name() + " (on a GPU, validation is PTX instrumentation)");
    }
    if (session.launchInterceptor() instanceof LaunchRedirect) {
      // Chained behind this validator's plain interceptor, the redirect would never be asked.
      throw new IllegalStateException("the session's interceptor runs launches itself (a LaunchRedirect); "
          + "validation cannot chain in front of it");
    }
    SimValidator v = new SimValidator(session, sim, speculator);
    LaunchInterceptor previous = v.previous;
    session.setLaunchInterceptor((kernel, grid, block, shmem, stream, args) -> {
      v.beforeLaunch(kernel, stream, args);
      if (previous != null) {
        previous.beforeLaunch(kernel, grid, block, shmem, stream, args);
      }
    });
    sim.addLaunchListener(v.listener);
    return v;
  }

  public AccessSpeculator speculator() {
    return speculator;
  }

  private void beforeLaunch(KernelRef kernel, GpuStream stream, KernelArgs args) {
    AccessSet set = speculator.speculate(kernel, args);
    byte[] bytes = new byte[args.layout().totalSize()];
    args.slab().get(0, bytes);
    synchronized (this) {
      pending.computeIfAbsent(stream, s -> new ArrayDeque<>()).add(new Pending(sequence++, kernel, bytes, set));
    }
  }

  private void onLaunch(SimLaunchRecord record) {
    byte[] args = record.args();
    Pending match = null;
    synchronized (this) {
      ArrayDeque<Pending> from = null;
      int at = Integer.MAX_VALUE;
      for (ArrayDeque<Pending> queue : pending.values()) {
        int i = 0;
        for (Pending p : queue) {
          if (i > at) {
            break;
          }
          if (p.kernel.entry().equals(record.kernelName()) && Arrays.equals(p.args, args)) {
            if (i < at || p.launch < match.launch) {
              at = i;
              match = p;
              from = queue;
            }
            break;
          }
          i++;
        }
      }
      if (match == null) {
        unmatched.add(record.toString());
        return;
      }
      Iterator<Pending> it = from.iterator();
      for (int i = 0; i <= at; i++) {
        it.next();
        it.remove();
      }
    }
    List<Violation> violations = new ArrayList<>();
    check(match, record.reads(), AccessKind.READ, violations);
    check(match, record.writes(), AccessKind.WRITE, violations);
    String fault = record.fault().map(Throwable::getMessage).orElse(null);
    LaunchCheck check = new LaunchCheck(match.launch, match.kernel, match.set, record.reads(), record.writes(),
        List.copyOf(violations), fault);
    synchronized (this) {
      checks.add(check);
    }
  }

  private static void check(Pending p, AccessLog log, AccessKind access, List<Violation> out) {
    AccessSet set = p.set;
    AllocationIndex index = set.allocations();
    for (AddressRange r : log.ranges()) {
      long a = r.start();
      while (a < r.end() && out.size() < MAX_VIOLATIONS_PER_LAUNCH) {
        int pos = index.find(a);
        if (pos < 0) {
          long stop = Math.min(r.end(), index.nextStartAfter(a));
          out.add(new Violation(p.kernel, p.launch, access, a, stop - a, null, Violation.Reason.UNMAPPED));
          a = stop;
          continue;
        }
        long stop = Math.min(r.end(), index.end(pos));
        AccessKind kind = set.kindAt(pos);
        Violation.Reason reason = kind == null ? Violation.Reason.NOT_SPECULATED
            : (access == AccessKind.WRITE ? !kind.writes() : !kind.reads()) ? Violation.Reason.WRONG_KIND : null;
        if (reason != null) {
          out.add(new Violation(p.kernel, p.launch, access, a, stop - a, index.name(pos), reason));
        }
        a = stop;
      }
    }
  }

  /** Every launch validated so far, in the order its record arrived. */
  public synchronized List<LaunchCheck> launches() {
    return List.copyOf(checks);
  }

  /** Every violation so far. */
  public synchronized List<Violation> violations() {
    List<Violation> all = new ArrayList<>();
    checks.forEach(c -> all.addAll(c.violations()));
    return all;
  }

  /** Launch records that matched no speculation, described. */
  public synchronized List<String> unmatched() {
    return List.copyOf(unmatched);
  }

  /** Detaches from the session and the context; idempotent. */
  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    context.removeLaunchListener(listener);
    session.setLaunchInterceptor(previous);
  }
}
