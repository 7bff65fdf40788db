package dev.thaw.pool;

import dev.thaw.pool.impl.ContextPoolImpl;
import java.io.IOException;
import java.time.Duration;
import java.util.List;

/**
 * Per device, a set of warm worker processes ready to become any image (see {@code docs/design/context-pool.md}).
 *
 * <p>The pool keeps {@link ContextPoolOptions#idleTarget()} idle workers per device, never more than
 * {@link ContextPoolOptions#maxWorkers()} alive, and refills in the background when one is taken or lost.
 * {@link #acquire} hands an idle worker to one caller (microseconds: no process work on that path). Workers are
 * never shared and never reused after becoming an image. A worker that dies is replaced; its caller sees a
 * {@link WorkerLostException}.
 *
 * <pre>{@code
 * try (ContextPool pool = ContextPool.create(new ContextPoolOptions().setIdleTarget(2))) {
 *   Worker w = pool.acquire();                                  // PoolExhaustedException -> 503
 *   w.becomeBlocking("gpt2:large", manifestBytes, ImageSource.store(storePath));
 *   InvokeResult r = w.invokeBlocking("{\"tokens\": [[464]]}".getBytes(UTF_8));
 *   w.release();                                                // dropped, scrubbed, back blank (or exits)
 * }
 * }</pre>
 */
public interface ContextPool extends AutoCloseable {

  /** Starts a pool; its first workers spawn at once, in the background. */
  static ContextPool create(ContextPoolOptions options) {
    return new ContextPoolImpl(options);
  }

  /**
   * Starts the JVM of the first worker a pool of {@code options} will spawn, before that pool exists: it starts and
   * runs {@code cuInit} meanwhile, then waits for its config, which that pool's first spawn sends it when it would
   * have started the same command (same java, JVM options, class path, device choice; no extra environment).
   * {@code thaw serve} calls it as its {@code main} begins. A prelaunched worker no pool takes ends with this process
   * or at {@link #discardPrelaunched()}.
   *
   * @throws IOException if the process cannot start
   */
  static void prelaunch(ContextPoolOptions options) throws IOException {
    ContextPoolImpl.prelaunch(options);
  }

  /** Ends the worker {@link #prelaunch} started, if no pool took it. */
  static void discardPrelaunched() {
    ContextPoolImpl.discardPrelaunched();
  }

  ContextPoolOptions options();

  /**
   * An idle worker on the first configured device, at once.
   *
   * @throws PoolExhaustedException if none is idle
   */
  default Worker acquire() {
    return acquire(options().devices().get(0));
  }

  /** An idle worker on {@code device}, at once; {@link PoolExhaustedException} if none is idle. */
  default Worker acquire(int device) {
    return acquire(device, Duration.ZERO);
  }

  /**
   * An idle worker on {@code device}, waiting up to {@code wait} for one to start when none is idle.
   *
   * @throws PoolExhaustedException if none is ready in time (the message says why: all in use, starts failing)
   * @throws IllegalArgumentException if the pool does not serve {@code device}
   * @throws IllegalStateException if the pool is closed
   */
  Worker acquire(int device, Duration wait);

  /**
   * Serves {@code devices} too (those it serves already are left as they are); their first workers spawn at once.
   * For a caller that starts the pool on device 0 before it has asked the driver how many devices there are.
   *
   * @throws IllegalStateException if the pool is closed
   */
  void addDevices(List<Integer> devices);

  /** Waits until every device has its idle target ready (and warm); false if {@code timeout} passed first. */
  boolean awaitIdle(Duration timeout) throws InterruptedException;

  /**
   * Registers {@code image} (replacing one of the same name) with the pool's prepare-ahead: blank workers hold at
   * most {@link ContextPoolOptions#maxPreparedImages()} images prepared (see {@link PreparedImage}), the most
   * recently cold-started ({@link #used}); a registration joins them while there is room, and never pushes one out.
   * Returns at once; a worker whose PREPARE fails is still used, and is sent the image whole when it becomes it.
   */
  void prepare(PreparedImage image);

  /**
   * A cold start of the image registered as {@code name}: it becomes the most recently used, and enters the set blank
   * workers hold prepared if it was not in it (the least recently used leaves, and workers drop it).
   */
  void used(String name);

  /** The image named {@code name} is no longer registered: no worker prepares it, and blank ones drop it. */
  void forget(String name);

  /**
   * Waits until the pool has its idle target on every device and each idle worker has answered every PREPARE
   * sent to it (succeeded or failed): then a cold start of a prepared image only maps and copies.
   *
   * @return false if that did not happen within {@code timeout}
   */
  boolean awaitPrepared(Duration timeout) throws InterruptedException;

  /** One snapshot per device. */
  List<PoolStats> stats();

  /** Process ids of every worker alive now (idle, starting, in use). */
  List<Long> pids();

  /** Kills every worker, handed out or not, and waits for them to exit. Idempotent. */
  @Override
  void close();
}
