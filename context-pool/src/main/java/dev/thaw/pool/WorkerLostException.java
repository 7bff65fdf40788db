package dev.thaw.pool;

/**
 * The worker is gone: it crashed, missed a deadline, broke the protocol or hit a sticky CUDA error, and the
 * pool killed it. Its instance is lost; a fresh worker can serve a retry.
 */
public class WorkerLostException extends WorkerException {

  public WorkerLostException(WorkerErrorKind kind, long pid, String remoteType, String message) {
    super(kind, pid, remoteType, message);
  }

  /** Always true: whatever the kind (a corrupt chunk found while streaming, too), the worker is gone. */
  @Override
  public boolean workerLost() {
    return true;
  }
}
