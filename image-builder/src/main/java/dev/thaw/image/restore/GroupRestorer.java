package dev.thaw.image.restore;

import dev.thaw.image.GroupImage;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Restores the ranks of a {@link GroupImage} on demand, all at once: rank r's image into its own
 * context, from its own source, through its own resources (so each rank's bytes come over its own device's link), one
 * thread per rank mapping its allocations and loading its modules beside the others. Each rank's restore gates its own
 * session: a launch of rank r waits for rank r's bytes alone. A rank whose restore fails fails the group's: the ranks
 * already restored are closed (their copies waited for, their memory freed) before the failure is thrown.
 */
public final class GroupRestorer {

  /** Where rank r goes: its context, where its bytes come from first, and the resources it borrows. */
  public record Target(GpuContext context, RestoreSource source, RestoreResources resources) {}

  private final OnDemandRestorer restorer;

  public GroupRestorer(ChunkStore store) {
    this.restorer = new OnDemandRestorer(store);
  }

  /**
   * Starts every rank's restore and returns when each rank's function is invocable (its bytes still streaming in).
   *
   * @param plans rank r's plan at r
   * @param targets rank r's context, source and resources at r
   * @throws IllegalArgumentException if there are not as many targets as plans, or two ranks share a context
   * @throws ImageRestoreException naming the first rank that failed, the others' failures suppressed in it; every
   *     rank's restore is closed by then
   */
  public GroupRestore restore(List<RestorePlan> plans, List<Target> targets, OnDemandOptions options) {
    check(plans.size(), targets);
    return start(plans, targets, (r, t) -> restorer.restore(plans.get(r), t.context(), t.source(), t.resources(),
        options));
  }

  /**
   * Does ahead of a cold start, for every rank at once, what depends on neither its bytes nor a request
   * ({@link OnDemandRestorer#prepare}: the function and state read, the modules loaded into its context), as a pool
   * worker does for an image while it is idle.
   *
   * @throws ImageRestoreException naming the first rank that failed; every rank prepared is closed by then
   */
  public List<PreparedRestore> prepare(List<RestorePlan> plans, List<Target> targets) {
    int n = plans.size();
    check(n, targets);
    ExecutorService threads = Executors.newFixedThreadPool(n, Threads.daemonFactory("thaw-group-prepare"));
    try {
      List<Future<PreparedRestore>> started = new ArrayList<>();
      for (int r = 0; r < n; r++) {
        RestorePlan plan = plans.get(r);
        Target t = targets.get(r);
        started.add(threads.submit(() -> restorer.prepare(plan, t.context(), t.source())));
      }
      List<PreparedRestore> done = new ArrayList<>();
      ImageRestoreException failure = collect(plans, started, done);
      if (failure != null) {
        done.forEach(p -> {
          if (p != null) {
            p.close();
          }
        });
        throw failure;
      }
      return List.copyOf(done);
    } finally {
      threads.shutdown();
    }
  }

  /**
   * As {@link #restore}, from every rank {@link #prepare prepared} in its target's context (rank r's at r); each
   * prepared rank passes to its restore, or is closed when the group's start fails.
   */
  public GroupRestore restorePrepared(List<PreparedRestore> prepared, List<Target> targets, OnDemandOptions options) {
    check(prepared.size(), targets);
    List<RestorePlan> plans = prepared.stream().map(PreparedRestore::plan).toList();
    try {
      return start(plans, targets, (r, t) -> restorer.restore(prepared.get(r), t.source(), t.resources(), options));
    } catch (RuntimeException | Error e) {
      // A rank whose restore never took its prepared state still holds its modules.
      prepared.forEach(p -> {
        if (!p.taken()) {
          p.close();
        }
      });
      throw e;
    }
  }

  /**
   * Restores every rank (from {@code prepared} ranks where given, else from {@code plans}) with its background
   * streaming held back, assembles the group's function over the restored sessions ({@link GroupFunction#assemble}:
   * it may grant the ranks each other's memory, which must not change a mapping while a copy into it is in flight),
   * then lets the rest stream if {@code options} says so. A failure anywhere closes whatever was restored first.
   *
   * @throws ImageRestoreException if the ranks' function is not a {@link GroupFunction}, or as {@link #restore}
   */
  public Serving serve(List<RestorePlan> plans, List<PreparedRestore> prepared, List<Target> targets,
      OnDemandOptions options) {
    GroupRestore restore = prepared != null ? restorePrepared(prepared, targets, options.heldBack())
        : restore(plans, targets, options.heldBack());
    try {
      if (!(restore.ranks().get(0).function().function() instanceof GroupFunction<?> f)) {
        throw new ImageRestoreException("rank 0's function " + restore.ranks().get(0).function().manifest()
            .function().className() + " is not a GroupFunction: a group image's ranks serve only through one", null);
      }
      GroupFunction.Group group = assemble(f, restore);
      if (options.streamInBackground()) {
        restore.streamRest();
      }
      return new Serving(restore, group);
    } catch (RuntimeException | Error e) {
      try {
        restore.close();
      } catch (RuntimeException c) {
        e.addSuppressed(c);
      }
      throw e;
    }
  }

  @SuppressWarnings("unchecked")
  private static <S> GroupFunction.Group assemble(GroupFunction<S> f, GroupRestore restore) {
    return f.assemble(restore.sessions(), (List<S>) restore.states(f.stateType()));
  }

  /** A group serving over its ranks' restores. */
  public record Serving(GroupRestore restore, GroupFunction.Group group) implements AutoCloseable {

    /** Closes the group, then every rank's restore (its copies waited for, its memory freed), even when one throws. */
    @Override
    public void close() {
      try {
        group.close();
      } finally {
        restore.close();
      }
    }
  }

  private static void check(int n, List<Target> targets) {
    if (targets.size() != n || n == 0) {
      throw new IllegalArgumentException(n + " ranks and " + targets.size() + " targets: one target per rank");
    }
    for (int a = 0; a < n; a++) {
      for (int b = a + 1; b < n; b++) {
        if (targets.get(a).context() == targets.get(b).context()) {
          throw new IllegalArgumentException("ranks " + a + " and " + b + " share a context: each rank restores "
              + "onto a device of its own");
        }
      }
    }
  }

  /** One rank's restore, started on the rank's thread. */
  @FunctionalInterface
  private interface RankStart {
    OnDemandRestore start(int rank, Target target) throws Exception;
  }

  private GroupRestore start(List<RestorePlan> plans, List<Target> targets, RankStart each) {
    int n = plans.size();
    long start = System.nanoTime();
    ExecutorService threads = Executors.newFixedThreadPool(n, Threads.daemonFactory("thaw-group-restore"));
    List<Future<OnDemandRestore>> started = new ArrayList<>();
    try {
      for (int r = 0; r < n; r++) {
        int rank = r;
        Target t = targets.get(r);
        started.add(threads.submit(() -> each.start(rank, t)));
      }
      List<OnDemandRestore> done = new ArrayList<>();
      ImageRestoreException failure = collect(plans, started, done);
      if (failure != null) {
        for (OnDemandRestore d : done) {
          if (d != null) {
            try {
              d.close();
            } catch (RuntimeException e) {
              failure.addSuppressed(e);
            }
          }
        }
        throw failure;
      }
      return new GroupRestore(List.copyOf(done), (System.nanoTime() - start) / 1e6);
    } finally {
      threads.shutdown();
    }
  }

  /**
   * Waits for every rank's task, each result (or null) into {@code done} by rank; the first failure naming its rank,
   * the others suppressed in it, or null. Every task is waited for, so none is left running with nobody to close what
   * it made.
   */
  private static <T> ImageRestoreException collect(List<RestorePlan> plans, List<Future<T>> started, List<T> done) {
    int n = started.size();
    ImageRestoreException failure = null;
    boolean interrupted = false;
    for (int r = 0; r < n; r++) {
      T got = null;
      for (;;) {
        try {
          got = started.get(r).get();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        } catch (ExecutionException e) {
          ImageRestoreException f = new ImageRestoreException("rank " + r + " of " + n + " ("
              + plans.get(r).manifest().function().className() + "): " + message(e.getCause()), e.getCause());
          if (failure == null) {
            failure = f;
          } else {
            failure.addSuppressed(f);
          }
          break;
        }
      }
      done.add(got);
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
    return failure;
  }

  private static String message(Throwable e) {
    String m = e.getMessage();
    return m == null || m.isBlank() ? e.getClass().getSimpleName() : m;
  }

  /** The ranks' restores, rank r's at r. */
  public static final class GroupRestore implements AutoCloseable {
    private final List<OnDemandRestore> ranks;
    private final double startMillis;
    private boolean closed;

    GroupRestore(List<OnDemandRestore> ranks, double startMillis) {
      this.ranks = ranks;
      this.startMillis = startMillis;
    }

    /** Rank r's restore at r. */
    public List<OnDemandRestore> ranks() {
      return ranks;
    }

    /** Rank r's rebuilt session at r. */
    public List<FunctionSession> sessions() {
      return ranks.stream().map(r -> r.function().session()).toList();
    }

    /** Rank r's host state at r, as its function's state type. */
    public <S> List<S> states(Class<S> type) {
      List<S> out = new ArrayList<>();
      for (OnDemandRestore r : ranks) {
        out.add(type.cast(r.function().state()));
      }
      return out;
    }

    /** Wall time from the call until every rank's function was invocable. */
    public double startMillis() {
      return startMillis;
    }

    /** Makes every rank stream the rest of its image in the background (a restore started without it). */
    public void streamRest() {
      ranks.forEach(OnDemandRestore::streamRest);
    }

    /** Waits until every rank's image is resident; throws the first rank's failure. */
    public void awaitResident() {
      for (OnDemandRestore r : ranks) {
        r.awaitResident();
      }
    }

    /**
     * Closes every rank's restore (its copies waited for, its session freed); the group running over the sessions
     * must be closed first. Closes them all even when one throws, then throws the first failure. Idempotent.
     */
    @Override
    public void close() {
      if (closed) {
        return;
      }
      closed = true;
      RuntimeException first = null;
      for (OnDemandRestore r : ranks) {
        try {
          r.close();
        } catch (RuntimeException e) {
          if (first == null) {
            first = e;
          } else {
            first.addSuppressed(e);
          }
        }
      }
      if (first != null) {
        throw first;
      }
    }
  }
}
