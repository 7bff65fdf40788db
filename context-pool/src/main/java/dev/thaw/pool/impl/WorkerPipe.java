package dev.thaw.pool.impl;

import dev.thaw.pool.WorkerException;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages.Exit;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Ready;
import dev.thaw.pool.protocol.WorkerMessages.Request;
import dev.thaw.pool.protocol.WorkerMessages.Resident;
import dev.thaw.runtime.host.Threads;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The parent's end of one worker's pipes: requests out (one writer at a time, a large one off the caller's thread),
 * and a reader thread that hands each answer to its request's future by id and each report (READY, RESIDENT, an
 * ERROR of the worker itself) to {@link Reports}. Every request has a deadline. The pipe decides nothing about the
 * worker: a read that fails, a deadline passed or an id-0 ERROR is reported, and the owner ends the worker.
 */
final class WorkerPipe {

  /** What the reader hears that answers no request. */
  interface Reports {
    void ready(Ready ready);

    void resident(Resident resident);

    /** An ERROR with id 0 (the worker failed and exits), or one of a kind that loses the worker. */
    void failed(int id, Failure failure);

    /** The request {@code type} got no answer within {@code timeout}. */
    void deadline(FrameType type, Duration timeout);

    /** The pipe broke ({@code what} says how): the process ended, or its stdin or stdout failed. */
    void broken(String what);

    /**
     * Bytes arrived that are not a frame a worker sends; the reader stops. {@code maybeDying}: a process dying
     * mid-frame, or a runtime printing on its way down, looks the same, so the owner should look whether it exited.
     */
    void garbled(String why, boolean maybeDying);
  }

  /**
   * An INVOKE frame up to this size is written on the caller's thread: a pipe holds at least one page even when the
   * user's pipe budget is spent, and it is empty then (the worker's reader drains it, and one request at a time means
   * everything sent before was read). A worker that stopped reading is still ended by the deadline: killing it closes
   * the pipe, which fails the write.
   */
  static final int INLINE_WRITE_BYTES = 4096;

  private final OutputStream out;
  private final DataInputStream in;
  private final int maxFrameBytes;
  private final ScheduledExecutorService timer;
  private final Executor io;
  private final Reports reports;
  private final long wakeAheadNanos;
  private final Map<Integer, CompletableFuture<Frame>> pending = new ConcurrentHashMap<>();
  private final AtomicInteger ids = new AtomicInteger();
  /** The first failure the owner reported: requests sent after it fail at once with it. */
  private volatile WorkerException failed;
  /** NEAR frames read, and those whose RESULT came while the reader polled for it: the wake-ahead's hits. */
  private final AtomicLong nears = new AtomicLong();
  private final AtomicLong nearsCaught = new AtomicLong();

  WorkerPipe(Process process, int maxFrameBytes, Duration wakeAhead, ScheduledExecutorService timer, Executor io,
      Reports reports) {
    this.out = new BufferedOutputStream(process.getOutputStream(), 1 << 16);
    this.in = new DataInputStream(new BufferedInputStream(process.getInputStream(), 1 << 16));
    this.maxFrameBytes = maxFrameBytes;
    this.wakeAheadNanos = wakeAhead.toNanos();
    this.timer = timer;
    this.io = io;
    this.reports = reports;
  }

  /** Starts the reader thread. */
  void startReading(String name) {
    Thread reader = Threads.startDaemon(this::readLoop, name);
  }

  /** Writes a prelaunched worker's config line, before any frame. */
  void writeConfigLine(String json) throws IOException {
    synchronized (out) {
      out.write((json + "\n").getBytes(StandardCharsets.UTF_8));
      out.flush();
    }
  }

  /** Sends a request; the future completes with its answer, or fails with the worker's ERROR or its end. */
  CompletableFuture<Frame> send(Request head, byte[] body, Duration timeout) {
    int id = ids.incrementAndGet();
    CompletableFuture<Frame> f = new CompletableFuture<>();
    pending.put(id, f);
    WorkerException e = failed;
    if (e != null) {
      f.completeExceptionally(e);
    }
    ScheduledFuture<?> deadline = timer.schedule(() -> reports.deadline(head.type(), timeout), timeout.toMillis(),
        TimeUnit.MILLISECONDS);
    f.whenComplete((r, x) -> {
      deadline.cancel(false);
      pending.remove(id);
    });
    Frame frame = Frame.of(id, head, body == null ? new byte[0] : body);
    if (head.type() == FrameType.INVOKE && frame.body().length + FrameCodec.HEADER_BYTES + 256 <= INLINE_WRITE_BYTES) {
      write(frame);
    } else {
      // Off the caller's thread: a worker that stops reading fills the pipe, and only its deadline may end that.
      io.execute(() -> write(frame));
    }
    return f;
  }

  /** Asks the worker to exit, off the caller's thread; a pipe already closed is fine. */
  void sendExit() {
    io.execute(() -> {
      try {
        synchronized (out) {
          FrameCodec.write(out, Frame.of(ids.incrementAndGet(), new Exit()));
        }
      } catch (IOException ignored) {
        // Already gone.
      }
    });
  }

  /** Fails every request pending and every one sent from now on with {@code e}. */
  void failAll(WorkerException e) {
    failed = e;
    for (CompletableFuture<Frame> f : pending.values()) {
      f.completeExceptionally(e);
    }
  }

  /** The request {@code id} failed with {@code e} (the worker lives on). */
  void fail(int id, Throwable e) {
    CompletableFuture<Frame> p = pending.get(id);
    if (p != null) {
      p.completeExceptionally(e);
    }
  }

  long[] wakeAheads() {
    return new long[] {nears.get(), nearsCaught.get()};
  }

  private void write(Frame frame) {
    try {
      synchronized (out) {
        FrameCodec.write(out, frame);
      }
    } catch (IOException x) {
      reports.broken("its stdin is closed (" + x.getMessage() + ")");
    }
  }

  private void readLoop() {
    try {
      while (true) {
        Frame f = FrameCodec.read(in, maxFrameBytes);
        switch (f.type()) {
          case READY -> reports.ready(Ready.from(f.head()));
          case RESULT -> complete(f);
          case NEAR -> awaitAwake(f.id());
          case RESIDENT -> reports.resident(Resident.from(f.head()));
          case ERROR -> reports.failed(f.id(), Failure.from(f.head()));
          default -> throw new ProtocolException(f.type() + " is not a frame a worker sends");
        }
      }
    } catch (EOFException e) {
      reports.broken("the process ended");
    } catch (ProtocolException e) {
      reports.garbled("it wrote bytes that are not a frame (" + e.getMessage() + ")", true);
    } catch (IOException e) {
      reports.broken("its stdout failed (" + e.getMessage() + ")");
    } catch (RuntimeException e) {
      reports.garbled("its frame did not read: " + e, false);
    }
  }

  private void complete(Frame f) {
    CompletableFuture<Frame> p = pending.get(f.id());
    if (p != null) {
      p.complete(f);
    }
  }

  /**
   * NEAR: the invoke {@code id} is due to end within the wake-ahead. Polls for its RESULT instead of sleeping in a
   * read, for at most three times the wake-ahead: a thread woken by the pipe after a long sleep is slow to run.
   */
  private void awaitAwake(int id) throws IOException {
    if (!pending.containsKey(id)) {
      return;
    }
    nears.incrementAndGet();
    long until = System.nanoTime() + 3 * wakeAheadNanos;
    while (in.available() == 0) {
      if (System.nanoTime() - until > 0) {
        return;
      }
      Thread.onSpinWait();
    }
    nearsCaught.incrementAndGet();
  }
}
