package dev.thaw.runtime.function;

import java.util.concurrent.CompletableFuture;

/**
 * An instance's way of serving several requests at once ({@link ThawFunction#engine}): requests are handed to it and
 * it works on them together, on a thread of its own that owns the session from its first request to {@link #close()}
 * (a language model: one decode step for every sequence in flight, requests joining and leaving between steps).
 *
 * <p>Contract: {@link #submit} returns at once, refusing a request it cannot serve before anything is queued; every
 * accepted request's future completes exactly once (with its response, or failed), parts and completions on the
 * engine's thread; a cancelled request ({@link ResponseStream#cancel()}) completes with what it has within a step; a
 * failure of the device fails the requests it touched, never the others' futures silently. After {@link #close()}
 * nothing runs on the device and every request not yet answered has failed. Thread-safe.
 */
public interface FunctionEngine extends AutoCloseable {

  /**
   * Takes one request.
   *
   * @throws InvalidRequestException if the request cannot be served (nothing is queued)
   * @throws IllegalStateException once closed
   */
  CompletableFuture<FunctionResponse> submit(FunctionRequest request, ResponseStream stream);

  /** Stops the engine's thread, waiting for a step under way; requests not answered fail. Idempotent. */
  @Override
  void close();
}
