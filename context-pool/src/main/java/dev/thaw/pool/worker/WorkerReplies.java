package dev.thaw.pool.worker;

import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Reply;
import java.io.IOException;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * The worker's stdout: frames only, one writer at a time. A write that fails means the parent is gone, and nothing of
 * the worker may outlive it: the process halts. Frames {@link #sendLater sent later} leave from a writer thread of their
 * own, in the order given, several in one flush: a function's engine hands a streamed request's parts (and then its
 * answer) over without waiting for the pipe, and launches its next step meanwhile.
 */
final class WorkerReplies {

  private final OutputStream out;
  private final LinkedBlockingQueue<Frame> later = new LinkedBlockingQueue<>();
  private Thread writer;

  WorkerReplies(OutputStream out) {
    this.out = out;
  }

  /**
   * Queues a frame for the writer thread: frames queued here leave in the order queued, but may leave after frames
   * {@link #send sent} directly since (a request's parts and its answer go the same way).
   */
  void sendLater(Frame f) {
    synchronized (later) {
      if (writer == null) {
        writer = new Thread(this::writeLater, "thaw-worker-writer");
        writer.setDaemon(true);
        writer.start();
      }
    }
    later.add(f);
  }

  private void writeLater() {
    List<Frame> batch = new ArrayList<>();
    while (true) {
      try {
        batch.add(later.take());
      } catch (InterruptedException e) {
        return;
      }
      later.drainTo(batch);
      synchronized (out) {
        try {
          for (Frame f : batch) {
            FrameCodec.write(out, f, false);
          }
          out.flush();
        } catch (IOException e) {
          Runtime.getRuntime().halt(WorkerMain.EXIT_PARENT_GONE);
        }
      }
      batch.clear();
    }
  }

  void send(int id, Reply reply) {
    send(Frame.of(id, reply));
  }

  void send(int id, Reply reply, byte[] body) {
    send(Frame.of(id, reply, body));
  }

  void send(Frame f) {
    synchronized (out) {
      try {
        FrameCodec.write(out, f);
      } catch (IOException e) {
        Runtime.getRuntime().halt(WorkerMain.EXIT_PARENT_GONE);
      }
    }
  }

  /** Reports a failure of the worker itself (id 0) and halts with {@code status}. */
  void fail(WorkerErrorKind kind, Throwable t, int status) {
    send(0, WorkerFailures.of(kind, t));
    Runtime.getRuntime().halt(status);
  }

  /** Reports a failure of the worker itself (id 0) and halts with {@code status}. */
  void fail(WorkerErrorKind kind, String message, int status) {
    send(0, new Failure(kind, message));
    Runtime.getRuntime().halt(status);
  }
}
