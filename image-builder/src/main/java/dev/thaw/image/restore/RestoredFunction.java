package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.ThawFunction;
import java.util.List;

/**
 * A function restored from an image and ready to serve: its rebuilt session with every byte verified and in
 * place, its host state, and an instance of its class. One request at a time. Closing it frees the session's
 * device memory and modules; the context stays open.
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

  /** Frees the session. Idempotent. */
  @Override
  public void close() {
    session.close();
  }
}
