package dev.thaw.pool;

/**
 * Why an operation on a worker failed. The worker reports most kinds itself; the parent adds {@link #CRASHED},
 * {@link #DEADLINE} and, for bytes it cannot read, {@link #PROTOCOL}. {@link #workerLost()} says whether the
 * worker is gone afterwards (killed and replaced by the pool).
 */
public enum WorkerErrorKind {
  /** The worker could not start: no device, a driver error, a bad option. */
  STARTUP(true),
  /** Bytes on the pipe were not a frame of the protocol. */
  PROTOCOL(true),
  /** The request does not fit the worker's state: INVOKE before BECOME, a second BECOME. */
  STATE(false),
  /**
   * A BECOME named a prepared image the worker no longer holds (it dropped it, or its PREPARE failed): the worker is
   * still blank, and the parent sends the image whole. Never reaches a caller of the pool.
   */
  NOT_PREPARED(false),
  /** The image cannot be restored: no such image, an unreadable manifest, a missing chunk, an address taken. */
  IMAGE(false),
  /** A chunk's bytes do not match its digest; nothing of it reached the device. */
  CORRUPT_CHUNK(false),
  /** The device (or pinned host memory) is out of memory. The server answers 503. */
  OUT_OF_MEMORY(false),
  /** The function refused the request ({@code InvalidRequestException}). The server answers 400. */
  INVALID_REQUEST(false),
  /** The function threw something else. */
  FUNCTION(false),
  /** A CUDA call failed and the context is still usable. */
  CUDA(false),
  /** A CUDA error that poisons the context (an illegal address, a kernel fault): the worker is killed. */
  CUDA_STICKY(true),
  /** The worker process exited or was killed while the operation ran. */
  CRASHED(true),
  /** The worker did not answer before the operation's deadline; it was killed. */
  DEADLINE(true),
  /** Anything else inside the worker. */
  INTERNAL(false);

  private final boolean workerLost;

  WorkerErrorKind(boolean workerLost) {
    this.workerLost = workerLost;
  }

  /** True when the worker does not survive this failure. */
  public boolean workerLost() {
    return workerLost;
  }
}
