package dev.thaw.pool.worker;

import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages.ExitAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.StatusAnswer;
import dev.thaw.runtime.host.Threads;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.util.ArrayDeque;

/**
 * The worker's two threads and its stdin. One thread reads stdin at a time and answers STATUS and EXIT itself, so a
 * busy worker still answers them, and passes CANCEL on at once; the other executes the work frames (PREPARE, FORGET,
 * BECOME, INVOKE, EXPORT, TRACE, RECYCLE), one at a time, in the order they came (an INVOKE of a function that
 * batches is handed to its engine, so executing it takes no longer than that). An INVOKE read while nothing executes
 * runs on the thread that read it, and the other thread takes over reading: a warm request waits for no thread to wake up.
 *
 * <p>Until {@link #serve} nothing executes: work read during start-up waits in the queue, except PREPAREs, which a
 * warm-up runs at its safe points ({@link #preparesThenRequestWaiting}). The worker never outlives its parent: end of
 * stdin (the kernel closes the pipe when the parent dies, even by SIGKILL) halts it, and so does bytes that are not a
 * frame, after one ERROR naming what was wrong.
 */
final class WorkerLoop {

  /** What the loop hands its work to. */
  interface Work {
    /** Executes one work frame and sends its answer (or arranges for it to be sent, for an INVOKE handed on). */
    void execute(Frame f);

    /**
     * An INVOKE was read off stdin, on the reading thread, before it is queued or executed: from now on a CANCEL with
     * its id finds it.
     */
    void arrived(Frame invoke);

    /** A CANCEL for the INVOKE with id {@code id}, on the reading thread; one already answered is ignored. */
    void cancel(int id);

    /** Called by the thread waiting for work once the worker has been idle as long as {@link #idleIn} asked. */
    void idle();

    /** The worker's state for a STATUS answer. */
    StatusAnswer status(int queued);
  }

  /** What {@link #take()} returns when the worker has been idle long enough (not a frame that travels). */
  private static final Frame IDLE = new Frame(FrameType.STATUS, -1, FrameCodec.head());

  private final DataInputStream in;
  private final WorkerReplies out;
  private final int maxFrameBytes;
  private final long pid = ProcessHandle.current().pid();
  /** Guards everything below but {@link #requested} and {@link #becomeRead}. */
  private final Object turn = new Object();
  /** Work frames read while another one executes (or before start-up ended), in order. */
  private final ArrayDeque<Frame> work = new ArrayDeque<>();
  private boolean reading;
  private boolean executing;
  /** Start-up is over: work may execute. */
  private boolean serving;
  /** The idle call is due at {@link #idleAt} (on {@link System#nanoTime()}). */
  private boolean idlePending;
  private long idleAt;
  private Work handler;
  /** A request (anything but a PREPARE or FORGET) came: warm-ups stop for good. */
  private volatile boolean requested;
  /** When the BECOME was read off stdin (one per worker), for its {@code queued} phase; 0 before. */
  private volatile long becomeRead;

  WorkerLoop(DataInputStream in, WorkerReplies out, int maxFrameBytes) {
    this.in = in;
    this.out = out;
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Starts the reader thread; frames are read, and STATUS and EXIT answered, from now on. */
  void startReading() {
    synchronized (turn) {
      reading = true;
    }
    Thread reader = Threads.startDaemon(() -> serve(true), "thaw-worker-reader");
  }

  /** Who executes work from now on; PREPAREs may run at a warm-up's safe points after this. */
  void attach(Work handler) {
    synchronized (turn) {
      this.handler = handler;
    }
  }

  /** Ends start-up: queued work executes now, and this thread joins the loop for good. */
  void serve() {
    synchronized (turn) {
      serving = true;
      turn.notifyAll();
    }
    serve(false);
  }

  /** True once a request came: a warm-up then stops for good, so that it never delays one nor competes with it. */
  boolean requested() {
    return requested;
  }

  long becomeRead() {
    return becomeRead;
  }

  /** True if a frame is queued for execution. */
  boolean workQueued() {
    synchronized (turn) {
      return !work.isEmpty();
    }
  }

  /** The thread waiting for work calls {@link Work#idle} {@code millis} from now, unless work comes first. */
  void idleIn(long millis) {
    synchronized (turn) {
      idlePending = true;
      idleAt = System.nanoTime() + millis * 1_000_000;
    }
  }

  /**
   * Runs the PREPAREs and FORGETs at the head of the queue now, on this thread, before the worker serves: a warm-up
   * calls it where it holds nothing on the device, so a PREPARE (which the parent waits for before it sends a BECOME)
   * never waits for a whole warm-up.
   *
   * @return true if a request is waiting (the warm-up should stop)
   */
  boolean preparesThenRequestWaiting() {
    while (!requested) {
      Frame f;
      Work h;
      synchronized (turn) {
        f = work.peek();
        h = handler;
        if (f == null || h == null || !aheadOfTime(f.type())) {
          break;
        }
        work.poll();
      }
      h.execute(f);
    }
    return requested;
  }

  private static boolean aheadOfTime(FrameType type) {
    return type == FrameType.PREPARE || type == FrameType.FORGET;
  }

  /**
   * The loop both threads run: read (then maybe execute what was read) or take queued work, and after it hand the
   * executing turn back.
   *
   * @param reads true for the thread that holds the reading turn when it starts
   */
  private void serve(boolean reads) {
    while (true) {
      Frame f;
      try {
        f = reads ? read() : take();
      } catch (InterruptedException e) {
        return;
      }
      reads = false;
      if (f == null) {
        reads = true;
        continue;
      }
      if (f == IDLE) {
        handler.idle();
      } else {
        handler.execute(f);
      }
      synchronized (turn) {
        executing = false;
        turn.notifyAll();
      }
    }
  }

  /** Waits for queued work (returned, to execute), the idle call (returns {@link #IDLE}) or the reading turn (null). */
  private Frame take() throws InterruptedException {
    synchronized (turn) {
      while (true) {
        if (serving && !executing && !work.isEmpty()) {
          executing = true;
          return work.poll();
        }
        if (!reading) {
          reading = true;
          return null;
        }
        if (idlePending && serving && !executing) {
          long left = idleAt - System.nanoTime();
          if (left <= 0) {
            // Holding the executing turn: a request read meanwhile waits for the idle work.
            idlePending = false;
            executing = true;
            return IDLE;
          }
          turn.wait(Math.max(1, left / 1_000_000));
          continue;
        }
        turn.wait();
      }
    }
  }

  /** Reads until an INVOKE this thread may execute now (returned), queueing other work; the reading turn is left. */
  private Frame read() {
    while (true) {
      Frame f = readFrame();
      if (f.type() == FrameType.BECOME || f.type() == FrameType.BECOME_GROUP) {
        becomeRead = System.nanoTime();
      }
      if (!aheadOfTime(f.type())) {
        requested = true;
      }
      if (f.type() == FrameType.INVOKE) {
        Work h;
        synchronized (turn) {
          h = handler;
        }
        if (h != null) {
          h.arrived(f);
        }
      }
      synchronized (turn) {
        if (f.type() == FrameType.INVOKE && serving && !executing && work.isEmpty()) {
          executing = true;
          reading = false;
          turn.notifyAll();
          return f;
        }
        work.add(f);
        turn.notifyAll();
      }
    }
  }

  /** The next work frame; STATUS and EXIT are answered here, anything else a worker does not take ends it. */
  private Frame readFrame() {
    while (true) {
      Frame f;
      try {
        f = FrameCodec.read(in, maxFrameBytes);
      } catch (EOFException e) {
        Runtime.getRuntime().halt(WorkerMain.EXIT_PARENT_GONE);
        return null;
      } catch (ProtocolException e) {
        System.err.println("worker " + pid + ": protocol error on stdin: " + e.getMessage());
        out.fail(WorkerErrorKind.PROTOCOL, e.getMessage(), WorkerMain.EXIT_PROTOCOL);
        return null;
      } catch (IOException e) {
        Runtime.getRuntime().halt(WorkerMain.EXIT_PARENT_GONE);
        return null;
      }
      switch (f.type()) {
        case STATUS -> out.send(f.id(), status());
        case CANCEL -> {
          Work h;
          synchronized (turn) {
            h = handler;
          }
          if (h != null) {
            h.cancel(f.id());
          }
        }
        case EXIT -> {
          out.send(f.id(), new ExitAnswer());
          Runtime.getRuntime().halt(0);
        }
        case BECOME, BECOME_GROUP, INVOKE, EXPORT, PREPARE, FORGET, TRACE, RECYCLE -> {
          return f;
        }
        default -> {
          out.send(0, new Failure(WorkerErrorKind.PROTOCOL, f.type() + " is not a request a worker takes"));
          Runtime.getRuntime().halt(WorkerMain.EXIT_PROTOCOL);
        }
      }
    }
  }

  private StatusAnswer status() {
    int queued;
    Work h;
    synchronized (turn) {
      queued = work.size();
      h = handler;
    }
    return h == null ? new StatusAnswer(pid, "STARTING", null, 0, queued) : h.status(queued);
  }
}
