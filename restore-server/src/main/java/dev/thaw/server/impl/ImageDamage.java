package dev.thaw.server.impl;

import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.store.ChunkHashMismatchException;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.server.ServeException;
import java.time.Duration;

/**
 * A function's image that failed an integrity check: a chunk whose bytes do not match its digest, found by a start or
 * by the restore streaming behind one. Until the function is registered again, or {@link #RETRY_AFTER} has passed
 * (then one start is tried again), every request gets the same error instead of starting a worker that would fail
 * the same way.
 *
 * @param detail what failed, naming the chunk (and the allocation that holds it)
 */
record ImageDamage(String tag, String detail, long sinceNanos) {

  static final Duration RETRY_AFTER = Duration.ofSeconds(30);

  /** The damage {@code failure} reports, or null when it is about something else. */
  static ImageDamage of(String tag, Throwable failure) {
    for (Throwable c = failure; c != null; c = c.getCause()) {
      if (c instanceof WorkerException w && w.kind() == WorkerErrorKind.CORRUPT_CHUNK) {
        return new ImageDamage(tag, w.detail(), System.nanoTime());
      }
      if (c instanceof CorruptChunkException
          || c instanceof ChunkHashMismatchException) {
        return new ImageDamage(tag, c.getMessage(), System.nanoTime());
      }
    }
    return null;
  }

  String message() {
    return "image '" + tag + "' is damaged: " + detail + "; re-register the function once its image is good again "
        + "(thaw verify names every damaged chunk)";
  }

  ServeException error() {
    return new ServeException(500, "image_damaged", message());
  }

  /** True once a start may be tried again. */
  boolean retryDue() {
    return System.nanoTime() - sinceNanos >= RETRY_AFTER.toNanos();
  }
}
