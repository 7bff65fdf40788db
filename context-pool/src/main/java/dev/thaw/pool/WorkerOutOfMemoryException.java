package dev.thaw.pool;

/** The worker's device ran out of memory. The worker lives on; the server answers 503. */
public class WorkerOutOfMemoryException extends WorkerException {

  public WorkerOutOfMemoryException(long pid, String remoteType, String message) {
    super(WorkerErrorKind.OUT_OF_MEMORY, pid, remoteType, message);
  }
}
