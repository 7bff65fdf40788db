package dev.thaw.pool;

/**
 * An operation on a worker failed. {@link #kind()} says why; when {@link #workerLost()} the worker is gone and
 * its handle is dead. {@link #remoteType()} names the exception class inside the worker, when there was one.
 */
public class WorkerException extends PoolException {

  private final WorkerErrorKind kind;
  private final long pid;
  private final String remoteType;
  private final String detail;

  public WorkerException(WorkerErrorKind kind, long pid, String remoteType, String message) {
    super("worker " + pid + ": " + kind + ": " + message);
    this.kind = kind;
    this.pid = pid;
    this.remoteType = remoteType;
    this.detail = message;
  }

  /** The message without the worker and kind in front. */
  public String detail() {
    return detail;
  }

  /** The exception for {@code kind}: {@link WorkerLostException} or {@link WorkerOutOfMemoryException} where one fits. */
  public static WorkerException of(WorkerErrorKind kind, long pid, String remoteType, String message) {
    if (kind == WorkerErrorKind.OUT_OF_MEMORY) {
      return new WorkerOutOfMemoryException(pid, remoteType, message);
    }
    if (kind.workerLost()) {
      return new WorkerLostException(kind, pid, remoteType, message);
    }
    return new WorkerException(kind, pid, remoteType, message);
  }

  public WorkerErrorKind kind() {
    return kind;
  }

  /** The worker's process id. */
  public long pid() {
    return pid;
  }

  /** The class of the exception inside the worker, or null when the failure was seen by the parent. */
  public String remoteType() {
    return remoteType;
  }

  public boolean workerLost() {
    return kind.workerLost();
  }
}
