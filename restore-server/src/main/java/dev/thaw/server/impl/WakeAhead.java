package dev.thaw.server.impl;

import dev.thaw.runtime.host.Threads;
import java.time.Duration;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * Wake-ahead on long warm invokes: a timer fires a request's {@link Scheduler.Pending#onNearlyDone} the wake-ahead
 * before its invoke is predicted to end, and the thread that answers it then spins ({@link #awaitAwake}) so the answer
 * finds it awake. A thread that slept through a long invoke wakes slowly (its core may have halted).
 *
 * <p>Invariant: {@link #arm}, {@link #invokeStarted}, {@link #invokeEnded} and {@link #close} run under the
 * {@link Scheduler}'s monitor, which guards the timer and the count of invokes; {@link #awaitAwake} runs on any thread
 * and reads only final fields.
 */
final class WakeAhead {

  /** Wake-ahead spins only while at most this many instances invoke: a quarter of the cores. */
  static final int MAX_INVOKING = Math.max(1, Runtime.getRuntime().availableProcessors() / 4);

  /** How long before a warm invoke's predicted end its thread stops sleeping; 0: never. */
  private final long nanos;
  private final ServerMetrics metrics;
  /** Invokes running now, of every function: wake-ahead spins only while few run. */
  private int invoking;
  /** Fires the wake-aheads; made at the first one. */
  private ScheduledThreadPoolExecutor timer;

  WakeAhead(Duration wakeAhead, ServerMetrics metrics) {
    this.nanos = wakeAhead.toNanos();
    this.metrics = metrics;
  }

  /** An instance was given a request to invoke. */
  void invokeStarted() {
    invoking++;
  }

  /** An instance's invoke ended (or its request went back to its queue). */
  void invokeEnded() {
    invoking--;
  }

  /**
   * When an invoke is predicted to take at least 1 ms and twice the wake-ahead, and at most {@link #MAX_INVOKING}
   * instances invoke now (a busy server's threads do not sleep long; spinning would take cores from the requests),
   * schedules {@code fire} the wake-ahead before its predicted end.
   *
   * @param predictedNanos the invoke's predicted length; 0 for no prediction yet
   * @return the timer armed, or null when none was
   */
  ScheduledFuture<?> arm(long predictedNanos, Runnable fire) {
    if (nanos == 0 || predictedNanos < Math.max(1_000_000, 2 * nanos) || invoking > MAX_INVOKING) {
      return null;
    }
    if (timer == null) {
      timer = new ScheduledThreadPoolExecutor(1, Threads.daemonFactory("thaw-server-wake-ahead"));
      timer.setRemoveOnCancelPolicy(true);
    }
    return timer.schedule(fire, predictedNanos - nanos, TimeUnit.NANOSECONDS);
  }

  /** Spins until {@code result} is done, or for at most three times the wake-ahead; counts whether it caught it. */
  void awaitAwake(Future<?> result) {
    long until = System.nanoTime() + 3 * nanos;
    while (!result.isDone()) {
      if (System.nanoTime() - until > 0) {
        metrics.wakeMissed.increment();
        return;
      }
      Thread.onSpinWait();
    }
    metrics.wakeCaught.increment();
  }

  void close() {
    if (timer != null) {
      timer.shutdownNow();
    }
  }
}
