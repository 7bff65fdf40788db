package dev.thaw.pool;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Options and waits the pool's tests share: small, quick-starting workers. */
final class PoolTesting {

  /** Generous: a 2-core CI box running nine builds starts a JVM slowly. Never a timing assertion. */
  static final Duration WAIT = Duration.ofSeconds(120);

  private PoolTesting() {}

  static ContextPoolOptions options(Path store) {
    return new ContextPoolOptions().setIdleTarget(1).setMaxWorkers(2).setMaxStarting(1).setStorePath(store)
        .setJvmOptions(List.of("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m"))
        .setWarmupLaunches(20).setStartTimeout(WAIT);
  }

  static void awaitExit(long pid) throws Exception {
    ProcessHandle h = ProcessHandle.of(pid).orElse(null);
    if (h == null) {
      return;
    }
    try {
      h.onExit().get(WAIT.toSeconds(), TimeUnit.SECONDS);
    } catch (TimeoutException e) {
      fail("worker " + pid + " still alive after " + WAIT);
    }
  }

  static boolean alive(long pid) {
    return ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
  }

  /** Closes the pool and checks that none of the workers it ever had is left. */
  static void closeAndCheck(ContextPool pool, List<Long> seen) throws Exception {
    List<Long> last = pool.pids();
    pool.close();
    pool.close();
    for (long pid : last) {
      assertTrue(!alive(pid), "worker " + pid + " outlived close()");
    }
    for (long pid : seen) {
      awaitExit(pid);
    }
  }
}
