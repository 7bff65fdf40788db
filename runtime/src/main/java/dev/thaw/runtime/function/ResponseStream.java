package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/**
 * A request in flight, seen from both ends: the function sends {@link #part parts} of its response as it makes them (a
 * language model, each token as it is decoded) and asks whether its caller still waits ({@link #cancelled()}); the
 * caller receives the parts and may {@link #cancel()}. The response the function returns at the end is still the
 * whole answer: parts are an early view of it, never a replacement.
 *
 * <p>Invariants: parts reach the receiver in the order they were sent, and none after {@link #cancel()}; the cancel
 * hooks run once, on the thread that cancels (or at once, on the thread that adds one to a cancelled stream). A
 * function that sees {@link #cancelled()} stops work on the request at its next safe point and answers with what it
 * has, leaving the device fit for the next request. Thread-safe.
 */
public final class ResponseStream {

  private final Consumer<JsonNode> parts;
  private final List<Runnable> onCancel = new ArrayList<>();
  private volatile boolean cancelled;

  private ResponseStream(Consumer<JsonNode> parts) {
    this.parts = parts;
  }

  /** A stream whose parts go to {@code receiver}, in order, on the function's thread. */
  public static ResponseStream streamed(Consumer<JsonNode> receiver) {
    if (receiver == null) {
      throw new IllegalArgumentException("a streamed response needs a receiver for its parts");
    }
    return new ResponseStream(receiver);
  }

  /** A request whose caller waits for the whole response only: parts are dropped; it can still be cancelled. */
  public static ResponseStream unstreamed() {
    return new ResponseStream(null);
  }

  /**
   * True when the caller takes parts: a function may skip the work of making them (a language model then keeps its
   * ids on the device until the end) when false.
   */
  public boolean streamed() {
    return parts != null;
  }

  /** Sends one part to the caller; dropped when the response is not streamed or was cancelled. */
  public void part(JsonNode part) {
    if (parts != null && !cancelled) {
      synchronized (parts) {
        parts.accept(part);
      }
    }
  }

  /** True once the caller went away: the function should end the request and answer with what it has. */
  public boolean cancelled() {
    return cancelled;
  }

  /** The caller no longer wants the response. Idempotent. */
  public void cancel() {
    List<Runnable> hooks;
    synchronized (onCancel) {
      if (cancelled) {
        return;
      }
      cancelled = true;
      hooks = List.copyOf(onCancel);
      onCancel.clear();
    }
    hooks.forEach(Runnable::run);
  }

  /** Runs {@code hook} once when the stream is cancelled; at once if it already is. */
  public void onCancel(Runnable hook) {
    synchronized (onCancel) {
      if (!cancelled) {
        onCancel.add(hook);
        return;
      }
    }
    hook.run();
  }
}
