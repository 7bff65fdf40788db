package dev.thaw.server.impl;

import dev.thaw.runtime.host.Threads;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;

/**
 * The request log's writer: lines are queued by the event loop and written by a thread of its own every
 * {@value #PERIOD_MILLIS} ms, so that no request waits for the log's stream (a write per line, synchronized, on
 * the event loop that would otherwise be reading the next request), nor for waking the writer. At most
 * {@value #MAX_PENDING} lines wait; beyond that lines are dropped and the drop is logged once it has room.
 * {@link #close()} writes what is left.
 */
final class RequestLog implements AutoCloseable {

  static final int MAX_PENDING = 1 << 16;
  static final long PERIOD_MILLIS = 10;

  private final Logger log;
  private final ConcurrentLinkedQueue<String> lines = new ConcurrentLinkedQueue<>();
  private final AtomicInteger pending = new AtomicInteger();
  private final AtomicLong dropped = new AtomicLong();
  private final Thread writer;
  private volatile boolean closed;

  RequestLog(Logger log) {
    this.log = log;
    this.writer = Threads.startDaemon(this::run, "thaw-request-log");
  }

  /** False when the log is off: the caller need not build a line. */
  boolean enabled() {
    return log.isInfoEnabled();
  }

  void add(String line) {
    if (closed) {
      log.info(line);
      return;
    }
    if (pending.incrementAndGet() > MAX_PENDING) {
      pending.decrementAndGet();
      dropped.incrementAndGet();
      return;
    }
    lines.add(line);
  }

  private void run() {
    while (!closed) {
      drain();
      LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(PERIOD_MILLIS));
    }
    drain();
  }

  private void drain() {
    for (String line = lines.poll(); line != null; line = lines.poll()) {
      pending.decrementAndGet();
      log.info(line);
    }
    long lost = dropped.getAndSet(0);
    if (lost > 0) {
      log.warn(lost + " request log lines dropped: the log could not keep up");
    }
  }

  /** Writes every queued line and stops the writer. Idempotent. */
  @Override
  public void close() {
    closed = true;
    LockSupport.unpark(writer);
    try {
      writer.join(TimeUnit.SECONDS.toMillis(10));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
