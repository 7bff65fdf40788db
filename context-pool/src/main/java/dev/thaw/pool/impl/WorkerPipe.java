package dev.thaw.pool.impl;

import dev.thaw.pool.WorkerException;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages.Cancel;
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
import java.util.ArrayDeque;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * The parent's end of one worker's pipes: requests out (in the order they were sent, one writer at a time, a large one
 * off the caller's thread), and a reader thread that hands each answer to its request's future by id, each PART to
 * its request's receiver, and each report (READY, RESIDENT, an ERROR of the worker itself) to {@link Reports}. Every
 * request has a deadline; a streamed one's starts again at each of its parts (a long generation that keeps sending is
 * alive). The pipe decides nothing about the worker: a read that fails, a deadline passed or an id-0 ERROR is
 * reported, and the owner ends the worker.
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
   * An INVOKE or CANCEL frame up to this size is written on the caller's thread when nothing waits to be written before
   * it: a pipe holds at least one page even when the user's pipe budget is spent, and the worker's reader drains it
   * (it reads on while another thread executes). A worker that stopped reading is still ended by the deadline: killing
   * it closes the pipe, which fails the write.
   */
  static final int INLINE_WRITE_BYTES = 4096;

  /** A request sent and not yet answered: its future, where its parts go (or null), when the worker last spoke of it. */
  private static final class Call {
    final CompletableFuture<Frame> answer = new CompletableFuture<>();
    final Consumer<byte[]> parts;
    volatile long heardNanos = System.nanoTime();

    Call(Consumer<byte[]> parts) {
      this.parts = parts;
    }
  }

  /** A request sent with its parts streamed: its id (what a CANCEL names) and its answer. */
  record Streamed(int id, CompletableFuture<Frame> answer) {}

  private final OutputStream out;
  private final DataInputStream in;
  private final int maxFrameBytes;
  private final ScheduledExecutorService timer;
  private final Executor io;
  private final Reports reports;
  private final long wakeAheadNanos;
  private final Map<Integer, Call> pending = new ConcurrentHashMap<>();
  /** Frames waiting for the writer, in order; guarded by itself. {@link #writing}: a drain is under way. */
  private final ArrayDeque<Frame> outbox = new ArrayDeque<>();
  private boolean writing;
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
    return sendStreamed(head, body, timeout, null).answer();
  }

  /**
   * Sends a request whose PART frames go to {@code parts} (on the reader thread, in order, before its answer); null for
   * none. Its deadline starts again at each part.
   */
  Streamed sendStreamed(Request head, byte[] body, Duration timeout, Consumer<byte[]> parts) {
    int id = ids.incrementAndGet();
    Call call = new Call(parts);
    CompletableFuture<Frame> f = call.answer;
    pending.put(id, call);
    WorkerException e = failed;
    if (e != null) {
      f.completeExceptionally(e);
    }
    ScheduledFuture<?> deadline = armDeadline(call, head.type(), timeout, timeout.toNanos());
    f.whenComplete((r, x) -> {
      deadline.cancel(false);
      pending.remove(id);
    });
    Frame frame = Frame.of(id, head, body == null ? new byte[0] : body);
    enqueue(frame, head.type() == FrameType.INVOKE);
    return new Streamed(id, f);
  }

  /**
   * Ends a request that misses its deadline; one whose worker sent a part within the last {@code timeout} is given
   * until {@code timeout} after that part.
   */
  private ScheduledFuture<?> armDeadline(Call call, FrameType type, Duration timeout, long waitNanos) {
    return timer.schedule(() -> {
      long quiet = System.nanoTime() - call.heardNanos;
      if (call.answer.isDone()) {
        return;
      }
      if (call.parts != null && quiet < timeout.toNanos()) {
        ScheduledFuture<?> again = armDeadline(call, type, timeout, timeout.toNanos() - quiet);
        call.answer.whenComplete((r, x) -> again.cancel(false));
        return;
      }
      reports.deadline(type, timeout);
    }, waitNanos, TimeUnit.NANOSECONDS);
  }

  /** Asks the worker to end the request {@code id} (sent by {@link #sendStreamed}); nothing once it was answered. */
  void cancel(int id) {
    if (pending.containsKey(id)) {
      enqueue(Frame.of(id, new Cancel()), true);
    }
  }

  /**
   * Writes {@code frame} after every frame sent before it: on this thread when it is small, {@code inline} and nothing
   * waits, else from the I/O executor (a worker that stops reading fills the pipe, and only its deadline may end that).
   */
  private void enqueue(Frame frame, boolean inline) {
    synchronized (outbox) {
      if (inline && !writing && outbox.isEmpty()
          && frame.body().length + FrameCodec.HEADER_BYTES + 256 <= INLINE_WRITE_BYTES) {
        write(frame);
        return;
      }
      outbox.add(frame);
      if (writing) {
        return;
      }
      writing = true;
    }
    io.execute(this::drain);
  }

  private void drain() {
    while (true) {
      Frame next;
      synchronized (outbox) {
        next = outbox.poll();
        if (next == null) {
          writing = false;
          return;
        }
      }
      write(next);
    }
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
    for (Call c : pending.values()) {
      c.answer.completeExceptionally(e);
    }
  }

  /** The request {@code id} failed with {@code e} (the worker lives on). */
  void fail(int id, Throwable e) {
    Call c = pending.get(id);
    if (c != null) {
      c.answer.completeExceptionally(e);
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
          case PART -> part(f);
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
    Call c = pending.get(f.id());
    if (c != null) {
      c.answer.complete(f);
    }
  }

  /** A part of a streamed request's response; one of a request not streamed, or already answered, is dropped. */
  private void part(Frame f) {
    Call c = pending.get(f.id());
    if (c != null && c.parts != null) {
      c.heardNanos = System.nanoTime();
      c.parts.accept(f.body());
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
