package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.ThawFunction;
import java.util.List;
import java.util.function.Consumer;

/**
 * A function restored from an image and ready to serve: its rebuilt session with every byte verified and in
 * place, its host state, and an instance of its class. One request at a time, unless its function serves several
 * at once ({@link #concurrency()}): then through its {@link #engine()}. Closing it closes the engine, then frees the
 * session's device memory and modules; the context stays open.
 *
 * @param <S> the function's host state type
 */
public final class RestoredFunction<S> implements AutoCloseable {

  private final String tag;
  private final ImageManifest manifest;
  private final ThawFunction<S> function;
  private final FunctionSession session;
  private final S state;
  private final RestoreTimings timings;
  private final List<String> notes;
  private FunctionEngine engine;
  private boolean closed;

  RestoredFunction(String tag, ImageManifest manifest, ThawFunction<S> function, FunctionSession session, S state,
      RestoreTimings timings, List<String> notes) {
    this.tag = tag;
    this.manifest = manifest;
    this.function = function;
    this.session = session;
    this.state = state;
    this.timings = timings;
    this.notes = List.copyOf(notes);
  }

  /** Serves one request with {@link ThawFunction#invoke}. */
  public FunctionResponse invoke(FunctionRequest request) throws Exception {
    return function.invoke(session, state, request);
  }

  /** Serves one request, its response in parts through {@code stream} where the function streams. */
  public FunctionResponse invoke(FunctionRequest request, ResponseStream stream) throws Exception {
    return function.invoke(session, state, request, stream);
  }

  /** How many requests the function serves at once ({@link ThawFunction#concurrency}). */
  public int concurrency() {
    return function.concurrency(state);
  }

  /**
   * The function's engine for concurrent requests, made at the first call ({@link ThawFunction#engine}).
   *
   * @throws UnsupportedOperationException if the function serves one request at a time
   * @throws IllegalStateException once closed
   */
  public synchronized FunctionEngine engine() {
    if (closed) {
      throw new IllegalStateException("the function '" + tag + "' is closed");
    }
    if (engine == null) {
      engine = function.engine(session, state);
    }
    return engine;
  }

  public String tag() {
    return tag;
  }

  public ImageManifest manifest() {
    return manifest;
  }

  public ThawFunction<S> function() {
    return function;
  }

  public FunctionSession session() {
    return session;
  }

  public S state() {
    return state;
  }

  public RestoreTimings timings() {
    return timings;
  }

  /** What differed from the build device and what the restore did about it; empty when nothing did. */
  public List<String> notes() {
    return notes;
  }

  /** Closes the engine (if one was made), then frees the session. Idempotent. */
  @Override
  public void close() {
    close(session -> { });
  }

  /**
   * Closes the engine (if one was made), hands the session to {@code beforeFree} while its memory is still mapped and
   * nothing of the function's runs any more, then frees the session, also when {@code beforeFree} fails.
   */
  public void close(Consumer<FunctionSession> beforeFree) {
    FunctionEngine e;
    synchronized (this) {
      closed = true;
      e = engine;
      engine = null;
    }
    try {
      if (e != null) {
        e.close();
      }
      beforeFree.accept(session);
    } finally {
      session.close();
    }
  }
}
