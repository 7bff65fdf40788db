package dev.thaw.pool.worker;

import com.fasterxml.jackson.core.JsonProcessingException;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.restore.CorruptChunkException;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.store.ChunkHashMismatchException;
import dev.thaw.image.store.ChunkNotFoundException;
import dev.thaw.image.store.StoreException;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/** Turns what a worker caught into the kind the parent acts on, and into an ERROR frame's head. */
final class WorkerFailures {

  private WorkerFailures() {}

  static WorkerErrorKind kindOf(Throwable t, boolean restoring) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof CudaOutOfMemoryException) {
        return WorkerErrorKind.OUT_OF_MEMORY;
      }
      if (c instanceof CudaException e) {
        return e.isSticky() ? WorkerErrorKind.CUDA_STICKY : WorkerErrorKind.CUDA;
      }
    }
    for (Throwable c = t; c != null; c = c.getCause()) {
      // A restore that stops on a damaged chunk wraps it: the kind is still the chunk's.
      if (c instanceof CorruptChunkException
          || c instanceof ChunkHashMismatchException) {
        return WorkerErrorKind.CORRUPT_CHUNK;
      }
    }
    if (t instanceof ImageNotFoundException || t instanceof InvalidManifestException
        || t instanceof ImageRestoreException || t instanceof ChunkNotFoundException || t instanceof StoreException
        || t instanceof AddressUnavailableException) {
      return WorkerErrorKind.IMAGE;
    }
    if (t instanceof InvalidRequestException || (!restoring && t instanceof JsonProcessingException)) {
      return WorkerErrorKind.INVALID_REQUEST;
    }
    return restoring ? WorkerErrorKind.INTERNAL : WorkerErrorKind.FUNCTION;
  }

  /** The ERROR head for {@code t}: its class, message and, for a CUDA error anywhere in its causes, the call. */
  static Failure of(WorkerErrorKind kind, Throwable t) {
    String m = t instanceof JsonProcessingException j ? j.getOriginalMessage() : t.getMessage();
    String message = m == null ? t.getClass().getSimpleName() : m;
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof CudaException e) {
        return new Failure(kind, t.getClass().getName(), message, e.call(), e.code(), e.errorName());
      }
    }
    return new Failure(kind, t.getClass().getName(), message, null, 0, null);
  }

  /** The cause a {@link CompletableFuture} wrapped, or {@code t}. */
  static Throwable unwrap(Throwable t) {
    return t instanceof CompletionException && t.getCause() != null ? t.getCause() : t;
  }
}
