package dev.thaw.pool.impl;

import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PoolExhaustedException;
import dev.thaw.pool.PoolStats;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.runtime.host.Threads;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.stream.Stream;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The pool: per device an idle deque, the starting and in-use sets, and one refill thread. One lock guards all
 * of them; {@link #acquire} only takes it and polls, so a hand-out costs no process work. The refill thread
 * spawns whenever a device has fewer idle-or-starting workers than its target (plus callers waiting), within the
 * caps, backing off after failed starts so a broken configuration cannot spawn in a loop.
 */
public final class ContextPoolImpl implements ContextPool {

  private static final Logger LOG = LoggerFactory.getLogger(ContextPool.class);
  private static final long MAX_BACKOFF_MILLIS = 10_000;

  private final ContextPoolOptions options;
  private final Path logDirectory;
  private final boolean ownsLogDirectory;
  private final ScheduledThreadPoolExecutor timer;
  private final ExecutorService io;
  private final Map<Integer, DeviceWorkers> devices = new LinkedHashMap<>();
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();
  private final AtomicBoolean closed = new AtomicBoolean();
  private final AtomicInteger spawned = new AtomicInteger();
  private final Thread refill;
  private final Thread shutdownHook;
  private final WorkerProcess.Listener listener = new Listener();
  /** What blank workers hold prepared. Guarded by {@code lock}. */
  private final PrepareAhead ahead;

  private static final class DeviceWorkers {
    final int device;
    final ArrayDeque<WorkerProcess> idle = new ArrayDeque<>();
    final Set<WorkerProcess> starting = new LinkedHashSet<>();
    final Set<WorkerProcess> inUse = new LinkedHashSet<>();
    int waiting;
    long started;
    long failedStarts;
    long lost;
    long recycled;
    int failuresInARow;
    long backoffUntilNanos;
    String lastFailure;

    DeviceWorkers(int device) {
      this.device = device;
    }

    int live() {
      return idle.size() + starting.size() + inUse.size();
    }
  }

  /** {@link ContextPool#prelaunch}. */
  public static void prelaunch(ContextPoolOptions options) throws IOException {
    Prelaunch.start(new ContextPoolOptions(options));
  }

  /** {@link ContextPool#discardPrelaunched}. */
  public static void discardPrelaunched() {
    Prelaunch.discard();
  }

  public ContextPoolImpl(ContextPoolOptions options) {
    this.options = new ContextPoolOptions(options);
    try {
      if (this.options.logDirectory() != null) {
        logDirectory = Files.createDirectories(this.options.logDirectory());
        ownsLogDirectory = false;
      } else {
        logDirectory = Files.createTempDirectory("thaw-pool-");
        ownsLogDirectory = true;
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot create the workers' log folder", e);
    }
    for (int d : this.options.devices()) {
      devices.put(d, new DeviceWorkers(d));
    }
    ahead = new PrepareAhead(this.options.maxPreparedImages());
    timer = new ScheduledThreadPoolExecutor(1, Threads.daemonFactory("thaw-pool-timer"));
    timer.setRemoveOnCancelPolicy(true);
    io = Executors.newCachedThreadPool(Threads.daemonFactory("thaw-pool-io"));
    shutdownHook = new Thread(this::killAll, "thaw-pool-shutdown");
    Runtime.getRuntime().addShutdownHook(shutdownHook);
    refill = Threads.startDaemon(this::refillLoop, "thaw-pool-refill");
  }

  @Override
  public ContextPoolOptions options() {
    lock.lock();
    try {
      return new ContextPoolOptions(options);
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void addDevices(List<Integer> more) {
    lock.lock();
    try {
      if (closed.get()) {
        throw new IllegalStateException("the context pool is closed");
      }
      List<Integer> all = new ArrayList<>(options.devices());
      for (int d : more) {
        if (d < 0) {
          throw new IllegalArgumentException("device ordinals are >= 0, not " + d);
        }
        if (!devices.containsKey(d)) {
          devices.put(d, new DeviceWorkers(d));
          all.add(d);
        }
      }
      options.setDevices(all);
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  // ---- acquire ----

  @Override
  public Worker acquire(int device, Duration wait) {
    long deadline = System.nanoTime() + Math.max(0, wait.toNanos());
    lock.lock();
    DeviceWorkers d = devices.get(device);
    if (d == null) {
      lock.unlock();
      throw new IllegalArgumentException("this pool serves devices " + devices.keySet() + ", not " + device);
    }
    boolean waits = !wait.isZero() && !wait.isNegative();
    if (waits) {
      d.waiting++;
      changed.signalAll();
    }
    try {
      while (true) {
        if (closed.get()) {
          throw new IllegalStateException("the context pool is closed");
        }
        WorkerProcess w = takeIdle(d);
        if (w != null) {
          d.inUse.add(w);
          changed.signalAll();
          return w;
        }
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          throw exhausted(d);
        }
        changed.awaitNanos(left);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new PoolExhaustedException(device, "interrupted while waiting for a worker on device " + device);
    } finally {
      if (waits) {
        d.waiting--;
      }
      lock.unlock();
    }
  }

  /**
   * The first live idle worker that is warm, else the first live one still warming up (its warm-up stops when the
   * caller sends it work: a caller waits for no warm-up); dead ones are dropped. Under the lock.
   */
  private static WorkerProcess takeIdle(DeviceWorkers d) {
    d.idle.removeIf(w -> !w.isAlive());
    for (WorkerProcess w : d.idle) {
      if (w.warm()) {
        d.idle.remove(w);
        return w;
      }
    }
    return d.idle.pollFirst();
  }

  private PoolExhaustedException exhausted(DeviceWorkers d) {
    return new PoolExhaustedException(d.device, "no ready worker on device " + d.device + ": " + d.inUse.size()
        + " in use, " + d.starting.size() + " starting, at most " + options.maxWorkers()
        + (d.lastFailure == null ? "" : "; last failure: " + d.lastFailure));
  }

  @Override
  public boolean awaitIdle(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    lock.lock();
    try {
      while (devices.values().stream().anyMatch(d -> d.idle.stream().filter(WorkerProcess::warm).count()
          < options.idleTarget())) {
        long left = deadline - System.nanoTime();
        if (left <= 0 || closed.get()) {
          return false;
        }
        changed.awaitNanos(left);
      }
      return true;
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void prepare(PreparedImage image) {
    lock.lock();
    try {
      apply(ahead.register(image));
    } finally {
      lock.unlock();
    }
  }

  @Override
  public void used(String name) {
    lock.lock();
    try {
      apply(ahead.used(name));
    } finally {
      lock.unlock();
    }
  }

  /** Tells every idle worker what to drop and what to prepare (sent in order: a worker reads them before any BECOME). */
  private void apply(PrepareAhead.Change change) {
    if (change.isEmpty()) {
      return;
    }
    for (DeviceWorkers d : devices.values()) {
      for (WorkerProcess w : d.idle) {
        w.forget(change.drop());
        change.add().forEach(w::prepare);
      }
    }
  }

  @Override
  public boolean awaitPrepared(Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    if (!awaitIdle(timeout)) {
      return false;
    }
    for (WorkerProcess w : all().toList()) {
      long left = deadline - System.nanoTime();
      if (left <= 0 || !w.awaitPrepares(left)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public void forget(String name) {
    lock.lock();
    try {
      apply(ahead.forget(name));
    } finally {
      lock.unlock();
    }
  }

  @Override
  public List<PoolStats> stats() {
    lock.lock();
    try {
      List<PoolStats> out = new ArrayList<>();
      for (DeviceWorkers d : devices.values()) {
        int preparing = 0;
        for (WorkerProcess w : d.idle) {
          preparing += w.preparing();
        }
        out.add(new PoolStats(d.device, d.idle.size(), d.starting.size(), d.inUse.size(), preparing, d.started,
            d.failedStarts, d.lost, d.recycled, d.lastFailure));
      }
      return out;
    } finally {
      lock.unlock();
    }
  }

  @Override
  public List<Long> pids() {
    return all().map(WorkerProcess::pid).sorted().toList();
  }

  private Stream<WorkerProcess> all() {
    lock.lock();
    try {
      List<WorkerProcess> out = new ArrayList<>();
      for (DeviceWorkers d : devices.values()) {
        out.addAll(d.idle);
        out.addAll(d.starting);
        out.addAll(d.inUse);
      }
      return out.stream();
    } finally {
      lock.unlock();
    }
  }

  // ---- refill ----

  private void refillLoop() {
    while (!closed.get()) {
      List<DeviceWorkers> toSpawn = new ArrayList<>();
      lock.lock();
      try {
        long now = System.nanoTime();
        for (DeviceWorkers d : devices.values()) {
          if (now - d.backoffUntilNanos < 0) {
            continue;
          }
          int want = options.idleTarget() + d.waiting - d.idle.size() - d.starting.size();
          int room = Math.min(options.maxWorkers() - d.live(), options.maxStarting() - d.starting.size());
          for (int i = 0; i < Math.min(want, room); i++) {
            toSpawn.add(d);
          }
        }
        if (toSpawn.isEmpty()) {
          changed.await(200, TimeUnit.MILLISECONDS);
          continue;
        }
      } catch (InterruptedException e) {
        return;
      } finally {
        lock.unlock();
      }
      for (DeviceWorkers d : toSpawn) {
        spawn(d);
      }
    }
  }

  private void spawn(DeviceWorkers d) {
    Path log = logDirectory.resolve("worker-" + d.device + "-" + spawned.incrementAndGet() + ".log");
    WorkerProcess w;
    try {
      w = WorkerProcess.spawn(options, d.device, log, timer, io, listener);
    } catch (IOException | RuntimeException e) {
      lock.lock();
      try {
        failed(d, "cannot start a worker process: " + e.getMessage());
      } finally {
        lock.unlock();
      }
      return;
    }
    lock.lock();
    try {
      // A worker already ready or ended here was handled by the listener, which waited for this lock.
      if (w.endedBy() == null && !w.ready().isDone()) {
        d.starting.add(w);
      }
      if (closed.get()) {
        w.lose(WorkerErrorKind.CRASHED, null, "the pool closed");
      }
    } finally {
      lock.unlock();
    }
  }

  private void failed(DeviceWorkers d, String why) {
    d.failedStarts++;
    d.lastFailure = why;
    d.failuresInARow++;
    long backoff = Math.min(MAX_BACKOFF_MILLIS, 100L << Math.min(d.failuresInARow, 10));
    d.backoffUntilNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoff);
    LOG.warn("Worker start failed on device {} (retry in {} ms): {}", d.device, backoff, why);
    changed.signalAll();
  }

  private final class Listener implements WorkerProcess.Listener {

    @Override
    public void ready(WorkerProcess w) {
      lock.lock();
      try {
        DeviceWorkers d = devices.get(w.device());
        if (d.starting.remove(w) || !d.idle.contains(w)) {
          d.started++;
          d.failuresInARow = 0;
          if (closed.get()) {
            w.lose(WorkerErrorKind.CRASHED, null, "the pool closed");
            return;
          }
          d.idle.addLast(w);
          // Sent before anyone can acquire it: a BECOME after these finds the image prepared, or waits for it.
          ahead.ahead().forEach(w::prepare);
        }
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }

    @Override
    public void warmed(WorkerProcess w) {
      lock.lock();
      try {
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }

    @Override
    public void ended(WorkerProcess w, WorkerException why, boolean lost) {
      lock.lock();
      try {
        DeviceWorkers d = devices.get(w.device());
        if (d.starting.remove(w) || (!d.idle.contains(w) && !d.inUse.contains(w) && w.start() == null)) {
          if (!closed.get()) {
            failed(d, why.getMessage());
          }
        } else if (d.idle.remove(w)) {
          d.lastFailure = why.getMessage();
        } else if (d.inUse.remove(w) && lost) {
          d.lost++;
          d.lastFailure = why.getMessage();
        }
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }

    @Override
    public void recycled(WorkerProcess w) {
      lock.lock();
      try {
        DeviceWorkers d = devices.get(w.device());
        if (d.inUse.remove(w)) {
          d.recycled++;
          if (closed.get()) {
            w.lose(WorkerErrorKind.CRASHED, null, "the pool closed");
          } else {
            d.idle.addFirst(w);
            // It dropped what it held prepared with its image: the pool's set is sent again, as to a new worker.
            ahead.ahead().forEach(w::prepare);
          }
        }
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }

    @Override
    public void returned(WorkerProcess w) {
      lock.lock();
      try {
        DeviceWorkers d = devices.get(w.device());
        if (d.inUse.remove(w)) {
          if (closed.get()) {
            w.lose(WorkerErrorKind.CRASHED, null, "the pool closed");
          } else {
            d.idle.addFirst(w);
          }
        }
        changed.signalAll();
      } finally {
        lock.unlock();
      }
    }
  }

  // ---- close ----

  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    Prelaunch.discard();
    refill.interrupt();
    try {
      refill.join(10_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    List<WorkerProcess> workers = killAll();
    for (WorkerProcess w : workers) {
      try {
        w.process().waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    lock.lock();
    try {
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    timer.shutdownNow();
    io.shutdownNow();
    try {
      Runtime.getRuntime().removeShutdownHook(shutdownHook);
    } catch (IllegalStateException e) {
      // The JVM is shutting down; the hook runs anyway.
    }
    if (ownsLogDirectory) {
      deleteTree(logDirectory);
    }
  }

  /** Kills every worker this pool started and has not seen end. Also the shutdown hook: no orphans. */
  private List<WorkerProcess> killAll() {
    closed.set(true);
    List<WorkerProcess> workers = all().toList();
    for (WorkerProcess w : workers) {
      w.lose(WorkerErrorKind.CRASHED, null, "the pool closed");
      w.process().destroyForcibly();
    }
    return workers;
  }

  private static void deleteTree(Path dir) {
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> {
        try {
          Files.deleteIfExists(p);
        } catch (IOException e) {
          // Best effort: a log folder in /tmp.
        }
      });
    } catch (IOException e) {
      // Best effort.
    }
  }
}
