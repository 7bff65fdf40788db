package dev.thaw.pool;

import java.nio.file.Path;
import java.time.Duration;
import java.util.stream.Collectors;

/**
 * A parent process for {@link ParentKilledTest}: starts a pool with two workers, prints {@code pids <a> <b>}
 * once both are ready, holds one of them as a caller would, and waits to be killed.
 */
public final class PoolParentMain {

  public static void main(String[] args) throws Exception {
    ContextPool pool = ContextPool.create(PoolTesting.options(args.length > 0 ? Path.of(args[0]) : null)
        .setIdleTarget(2).setMaxWorkers(3).setMaxStarting(2));
    Worker held = pool.acquire(0, PoolTesting.WAIT);
    if (!pool.awaitIdle(PoolTesting.WAIT)) {
      System.out.println("not ready: " + pool.stats());
      System.exit(1);
    }
    System.out.println("pids " + pool.pids().stream().map(String::valueOf).collect(Collectors.joining(" "))
        + " held " + held.pid());
    System.out.flush();
    Thread.sleep(Duration.ofMinutes(10).toMillis());
  }
}
