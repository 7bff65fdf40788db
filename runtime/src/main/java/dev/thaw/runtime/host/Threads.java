package dev.thaw.runtime.host;

import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Thaw's background threads: daemons (none of them may keep a JVM alive: a worker halts when its parent goes, a
 * server when it is told to), named for what they do so a thread dump reads.
 */
public final class Threads {

  private Threads() {}

  /** A daemon thread named {@code name}, not started. */
  public static Thread daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    return t;
  }

  /** Starts {@code r} on a daemon thread named {@code name}. */
  public static Thread startDaemon(Runnable r, String name) {
    Thread t = daemon(r, name);
    t.start();
    return t;
  }

  /**
   * A factory of daemon threads named {@code name}, then {@code name-2}, {@code name-3}, … for an executor of more
   * than one thread.
   */
  public static ThreadFactory daemonFactory(String name) {
    AtomicInteger made = new AtomicInteger();
    return r -> {
      int n = made.incrementAndGet();
      return daemon(r, n == 1 ? name : name + "-" + n);
    };
  }
}
