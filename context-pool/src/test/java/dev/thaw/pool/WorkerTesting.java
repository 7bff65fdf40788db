package dev.thaw.pool;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

final class WorkerTesting {

  private WorkerTesting() {}

  /** The future's value, or its cause thrown as it is. */
  static <T> T join(CompletableFuture<T> f) throws Throwable {
    try {
      return f.get();
    } catch (ExecutionException e) {
      throw e.getCause();
    }
  }
}
