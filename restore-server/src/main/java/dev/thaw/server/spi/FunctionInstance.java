package dev.thaw.server.spi;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import java.util.concurrent.CompletableFuture;

/**
 * One instance of a function: an image restored onto a device, serving one request at a time, or as many at once as
 * its function's {@code concurrency} (then it {@link #invokesAsync() invokes asynchronously}: the function batches
 * them). The server owns the thread every call of an instance runs on (never an event loop), so an implementation may
 * block; the one exception is {@link #invoke} of an instance that invokes asynchronously.
 *
 * <p>Lifecycle: an {@link InstanceFactory} starts it (the cold start); {@link #invoke} serves requests;
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
   * @throws InvalidRequestException if the function refuses the request (HTTP 400);
   *     the instance stays fit
   * @throws Exception anything else: the request failed (HTTP 500); {@link #healthy()} says whether the instance
   *     may serve again
   */
  FunctionResponse invokeBlocking(FunctionRequest request) throws Exception;

  /**
   * Serves one request without holding the calling thread for the function's time where the instance can (a
   * worker process answers over its pipe): the server calls it on the instance's own thread and finishes the
   * request on whichever thread completes the future, saving a thread hop on the way back. Fails as
   * {@link #invokeBlocking} throws. By default, {@link #invokeBlocking} on the calling thread.
   */
  default CompletableFuture<Invoked> invoke(FunctionRequest request) {
    long t = System.nanoTime();
    try {
      FunctionResponse r = invokeBlocking(request);
      return CompletableFuture.completedFuture(new Invoked(r, (System.nanoTime() - t) / 1e6));
    } catch (Exception | Error e) {
      return CompletableFuture.failedFuture(e);
    }
  }

  /**
   * Serves one request whose response may stream: the parts the function sends reach {@code stream} as they are made
   * (when it is {@link ResponseStream#streamed()}), and cancelling {@code stream} ends the request early; it still
   * completes, with what the function had. By default {@link #invoke(FunctionRequest)}: the response whole, and no
   * early end.
   */
  default CompletableFuture<Invoked> invoke(FunctionRequest request, ResponseStream stream) {
    return invoke(request);
  }

  /**
   * True when {@link #invoke} returns at once, the function running elsewhere (a worker process: the call only
   * writes the request to its pipe), never blocking the calling thread: the server then calls it on the thread
   * that dispatches the request, an event loop included, instead of handing it to the instance's own thread.
   */
  default boolean invokesAsync() {
    return false;
  }

  /**
   * A served request.
   *
   * @param response the function's response
   * @param functionMillis the function's own invoke, timed where it ran (in a worker, without the pipe and the
   *     request's decoding): what an in-process caller would have waited
   */
  record Invoked(FunctionResponse response, double functionMillis) {}

  /** False once the instance cannot serve any more; the server then evicts it. */
  boolean healthy();

  /** A short description for logs: how and where it runs. */
  String describe();

  /**
   * The timeline of this instance's restore as Chrome-trace JSON, when its restore keeps one (on-demand restore
   * does): completes once it can be written (the restore resident), with null when there is none.
   */
  default CompletableFuture<RestoreTimeline> restoreTimeline() {
    return CompletableFuture.completedFuture(null);
  }

  /**
   * A restore's timeline.
   *
   * @param chromeTrace {@code {"traceEvents": [...]}}, timestamps in microseconds from {@code originNanos}
   * @param originNanos when the restore began, on the {@link System#nanoTime()} clock
   */
  record RestoreTimeline(JsonNode chromeTrace, long originNanos) {}

  /** Frees the instance's device memory and whatever else it holds. Idempotent. */
  @Override
  void close();

  /**
   * Completes, with why, if the instance ends on its own (its worker process died while idle); never for a close.
   * The server then drops it at once instead of sending it the next request.
   */
  default CompletableFuture<String> lost() {
    return new CompletableFuture<>();
  }
}
