package dev.thaw.pool;

/** {@link ContextPool#acquire} found no ready worker in time. The server answers 503 (retry later). */
public class PoolExhaustedException extends PoolException {

  private final int device;

  public PoolExhaustedException(int device, String message) {
    super(message);
    this.device = device;
  }

  /** The device ordinal asked for. */
  public int device() {
    return device;
  }
}
