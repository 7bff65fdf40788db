package dev.thaw.server.spi;

import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;

/**
 * One instance of a function: an image restored onto a device, serving one request at a time. The server
 * owns the thread every call of an instance runs on (never an event loop), so an implementation may block.
 *
 * <p>Lifecycle: an {@link InstanceFactory} starts it (the cold start); {@link #invokeBlocking} serves requests;
 * {@link #close()} evicts it and frees what it holds. After a failure that leaves the instance unfit (a fault on
 * the device, a dead worker) {@link #healthy()} turns false and the server evicts it; the next request starts a
 * fresh one.
 */
public interface FunctionInstance extends AutoCloseable {

  /** Where the start that made this instance spent its time. */
  StartPhases startPhases();

  /** The device it lives on, by ordinal. */
  int device();

  /**
   * Serves one request.
   *
   * @throws dev.thaw.runtime.function.InvalidRequestException if the function refuses the request (HTTP 400);
   *     the instance stays fit
   * @throws Exception anything else: the request failed (HTTP 500); {@link #healthy()} says whether the instance
   *     may serve again
   */
  FunctionResponse invokeBlocking(FunctionRequest request) throws Exception;

  /** False once the instance cannot serve any more; the server then evicts it. */
  boolean healthy();

  /** A short description for logs: how and where it runs. */
  String describe();

  /**
   * The timeline of this instance's restore as Chrome-trace JSON, when its restore keeps one (on-demand restore
   * does): completes once it can be written (the restore resident), with null when there is none.
   */
  default java.util.concurrent.CompletableFuture<RestoreTimeline> restoreTimeline() {
    return java.util.concurrent.CompletableFuture.completedFuture(null);
  }

  /**
   * A restore's timeline.
   *
   * @param chromeTrace {@code {"traceEvents": [...]}}, timestamps in microseconds from {@code originNanos}
   * @param originNanos when the restore began, on the {@link System#nanoTime()} clock
   */
  record RestoreTimeline(com.fasterxml.jackson.databind.JsonNode chromeTrace, long originNanos) {}

  /** Frees the instance's device memory and whatever else it holds. Idempotent. */
  @Override
  void close();
}
