package dev.thaw.pool.impl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.PoolTestImages;
import dev.thaw.pool.Worker;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A worker JVM prelaunched before its pool ({@link ContextPool#prelaunch}, what {@code thaw serve} does as its main
 * begins) becomes that pool's first worker when the pool would have started the same command, and serves as any
 * worker does; a pool that would start another command kills it and spawns its own; one nobody takes is discarded.
 * Real worker processes and a real store, on the device {@code THAW_DEVICE} picks.
 */
class PrelaunchTest {

  private static final Duration WAIT = Duration.ofSeconds(120);

  @TempDir static Path dir;
  static PoolTestImages.Built probe;

  @BeforeAll
  static void build() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
  }

  @AfterEach
  void noneLeft() {
    ContextPool.discardPrelaunched();
  }

  private static ContextPoolOptions options(List<String> jvm) {
    return new ContextPoolOptions().setIdleTarget(1).setMaxWorkers(1).setMaxStarting(1)
        .setStorePath(dir.resolve("store")).setJvmOptions(jvm).setWarmupLaunches(0).setStartTimeout(WAIT);
  }

  private static final List<String> JVM = List.of("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m");

  @Test
  void thePoolsFirstWorkerIsThePrelaunchedProcessAndServes() throws Exception {
    ContextPool.prelaunch(options(JVM));
    Process early = Prelaunch.waiting();
    assertNotNull(early, "a worker JVM waits for its config");
    ContextPool pool = ContextPool.create(options(JVM));
    try {
      Worker w = pool.acquire(0, WAIT);
      assertEquals(early.pid(), w.pid(), "the pool took the prelaunched process");
      assertNull(Prelaunch.waiting(), "taken once");
      assertTrue(w.start().phases().containsKey("prelaunchWait"), "it says how long it waited: " + w.start());
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertEquals(7, w.invokeBlocking(PoolTestImages.json("{\"op\": \"echo\", \"value\": 7}")).jsonTree()
          .get("echo").asInt());
      w.release();
    } finally {
      pool.close();
    }
  }

  @Test
  void aPoolThatWouldStartAnotherCommandKillsItAndSpawnsItsOwn() throws Exception {
    ContextPool.prelaunch(options(JVM));
    Process early = Prelaunch.waiting();
    ContextPool pool = ContextPool.create(options(List.of("-XX:+UseSerialGC", "-Xmx200m")));
    try {
      Worker w = pool.acquire(0, WAIT);
      assertNotEquals(early.pid(), w.pid());
      assertTrue(early.waitFor(30, TimeUnit.SECONDS), "the prelaunched process was ended");
      assertFalse(w.start().phases().containsKey("prelaunchWait"), w.start().toString());
      w.release();
    } finally {
      pool.close();
    }
  }

  @Test
  void oneNobodyTakesIsDiscardedAndOneWhoseParentLeavesEnds() throws Exception {
    ContextPool.prelaunch(options(JVM));
    Process early = Prelaunch.waiting();
    ContextPool.prelaunch(options(JVM));
    assertEquals(early, Prelaunch.waiting(), "one at a time");
    ContextPool.discardPrelaunched();
    assertNull(Prelaunch.waiting());
    assertTrue(early.waitFor(30, TimeUnit.SECONDS), "discarded: ended");

    // Its stdin closed before a config came (the parent ended): it exits by itself.
    ContextPool.prelaunch(options(JVM));
    Process orphan = Prelaunch.waiting();
    orphan.getOutputStream().close();
    assertTrue(orphan.waitFor(60, TimeUnit.SECONDS), "a worker whose parent left never waits forever");
  }
}
