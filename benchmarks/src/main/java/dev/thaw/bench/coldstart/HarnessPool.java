package dev.thaw.bench.coldstart;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The context pool the pooled contenders share: one per harness run, started the first time one asks for it
 * and closed at the end. One idle worker, and one starting at a time, so no worker starts while a cold start is
 * timed: a contender waits for the pool to be idle ({@link #ready}) before it starts its clock.
 */
final class HarnessPool implements AutoCloseable {

  private final String device;
  private final Path store;
  private final Duration timeout;
  private final Path hostCache;
  private final boolean awaitResident;
  private final int helperLinks;
  private ContextPool pool;

  HarnessPool(String device, Path store, Duration timeout) {
    this(device, store, timeout, null, false, 0);
  }

  /**
   * A pool like {@code other} whose workers map the host image cache at {@code hostCache} (or none), and restore
   * fully before they answer BECOME when {@code awaitResident} (else on demand, the pool's default), each holding a
   * link to up to {@code helperLinks} other GPUs (multi-link restore; 0: through its own link alone).
   */
  HarnessPool(HarnessPool other, Path hostCache, boolean awaitResident, int helperLinks) {
    this(other.device, other.store, other.timeout, hostCache, awaitResident, helperLinks);
  }

  private HarnessPool(String device, Path store, Duration timeout, Path hostCache, boolean awaitResident,
      int helperLinks) {
    this.device = device;
    this.store = store;
    this.timeout = timeout;
    this.hostCache = hostCache;
    this.awaitResident = awaitResident;
    this.helperLinks = helperLinks;
  }

  /**
   * How many devices {@code device} offers, without touching a GPU in this process (every contender starts from the
   * state it claims): the simulated devices {@code THAW_SIM_DEVICES} asks for, or the GPUs {@code nvidia-smi -L}
   * lists; 0 when that cannot be told.
   */
  static int deviceCount(String device) {
    if (device.equals("sim")) {
      return SimOptions.fromEnvironment().deviceCount();
    }
    try {
      Process p = new ProcessBuilder("nvidia-smi", "-L").redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      return p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0 ? (int) out.lines()
          .filter(l -> l.startsWith("GPU ")).count() : 0;
    } catch (IOException e) {
      return 0;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return 0;
    }
  }

  /**
   * A worker's warm-up launches: the pool's default on a GPU; few on the simulated device, where each launch runs
   * a Java kernel and nothing measured there is a GPU time anyway (it keeps the CI smoke test short).
   */
  static int warmupLaunches(String device) {
    return device.equals("sim") ? 100 : ContextPoolOptions.DEFAULT_WARMUP_LAUNCHES;
  }

  /** The pool with its idle worker ready. */
  synchronized ContextPool ready() throws InterruptedException, Contender.ContenderException {
    if (pool == null) {
      pool = ContextPool.create(new ContextPoolOptions().setDevices(List.of(0)).setIdleTarget(1).setMaxWorkers(2)
          .setMaxStarting(1).setDeviceChoice(device).setStorePath(store).setHostCachePath(hostCache)
          .setWarmupLaunches(warmupLaunches(device)).setAwaitResident(awaitResident).setHelperLinks(helperLinks));
    }
    // Idle, and done preparing what it was asked to (a cold start of a prepared image then only maps and copies).
    if (!pool.awaitPrepared(timeout)) {
      throw new Contender.ContenderException("the context pool had no idle worker after " + timeout.toSeconds()
          + " s: " + pool.stats());
    }
    return pool;
  }

  Path store() {
    return store;
  }

  /** {@code cuda}, {@code sim} or {@code auto}: the workers' device choice. */
  String device() {
    return device;
  }

  /**
   * The image's manifest as stored, read once per model as a server's function registry holds it: reading it is
   * no part of a cold start.
   */
  byte[] manifest(String tag) throws Contender.ContenderException {
    return manifest(store, tag);
  }

  static byte[] manifest(Path store, String tag) throws Contender.ContenderException {
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      return s.manifest(tag).orElseThrow(() -> new Contender.ContenderException("the store has no image " + tag));
    }
  }

  @Override
  public synchronized void close() {
    if (pool != null) {
      pool.close();
      pool = null;
    }
  }
}
