package dev.thaw.pool.worker;

import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Reply;
import java.io.IOException;
import java.io.OutputStream;

/**
 * The worker's stdout: frames only, one writer at a time. A write that fails means the parent is gone, and nothing of
 * the worker may outlive it: the process halts.
 */
final class WorkerReplies {

  private final OutputStream out;

  WorkerReplies(OutputStream out) {
    this.out = out;
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
