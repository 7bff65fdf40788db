package dev.thaw.pool.impl;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.PoolTestImages;
import dev.thaw.pool.Worker;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A worker's JVM takes its parent's class-data sharing archive, and one it cannot use costs it nothing but time. */
class WorkerCommandTest {

  private static final List<String> LAUNCHER = List.of("-XX:SharedArchiveFile=/opt/thaw/lib/thaw.jsa", "-Xmx8g",
      "-cp", "/opt/thaw/lib/a.jar:/opt/thaw/lib/b.jar", "dev.thaw.cli.ThawCli", "serve", "-Xshare:off");

  @TempDir
  Path dir;

  @Test
  void aWorkerOnItsParentsJvmAndJarsMapsItsParentsArchive() {
    assertEquals(List.of("-XX:SharedArchiveFile=/opt/thaw/lib/thaw.jsa"),
        WorkerCommand.classDataSharing(new ContextPoolOptions(), LAUNCHER),
        "the parent's archive, and nothing after its main class (the program's own arguments)");
    assertEquals(List.of("-Xshare:auto"), WorkerCommand.classDataSharing(new ContextPoolOptions(),
        List.of("-Xshare:auto", "--add-opens", "-Xshare:off", "-cp", "x.jar", "Main")),
        "an option's value is no option");
    assertEquals(List.of(), WorkerCommand.classDataSharing(new ContextPoolOptions(),
        List.of("-Xmx1g", "-cp", "x.jar", "Main")), "none where the parent has none: the JDK's own archive");
  }

  @Test
  void noneWhereThePoolNamesItsOwnJvmClassPathOrArchive() {
    assertEquals(List.of(), WorkerCommand.classDataSharing(new ContextPoolOptions().setClassPath("/x/a.jar"), LAUNCHER),
        "an archive is valid only with the class path it was made with");
    assertEquals(List.of(), WorkerCommand.classDataSharing(new ContextPoolOptions().setJavaCommand("/jdk/bin/java"),
        LAUNCHER), "nor with another JVM");
    assertEquals(List.of(), WorkerCommand.classDataSharing(
        new ContextPoolOptions().setJvmOptions(List.of("-Xshare:off")), LAUNCHER), "the pool's own choice wins");
  }

  /**
   * An archive that does not match (here: not an archive at all) is ignored by the worker's JVM without a word on
   * stdout, which carries the protocol's frames: the worker starts, says READY and answers.
   */
  @Test
  void aWorkerGivenAnArchiveItCannotUseStartsAndServes() throws Exception {
    PoolTestImages.Built probe = PoolTestImages.probe(dir.resolve("store"), "probe");
    Path stale = Files.write(dir.resolve("stale.jsa"), new byte[4096]);
    List<String> jvm = new ArrayList<>(List.of("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx256m"));
    jvm.add("-XX:SharedArchiveFile=" + stale);
    ContextPool pool = ContextPool.create(new ContextPoolOptions().setIdleTarget(1).setMaxWorkers(1).setMaxStarting(1)
        .setStorePath(dir.resolve("store")).setJvmOptions(jvm).setWarmupLaunches(0)
        .setStartTimeout(Duration.ofSeconds(120)).setLogDirectory(dir.resolve("logs")));
    try {
      Worker w = pool.acquire(0, Duration.ofSeconds(120));
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      assertEquals(42, w.invokeBlocking(PoolTestImages.json("{\"op\": \"echo\", \"value\": 42}")).jsonTree()
          .get("echo").asInt());
      w.release();
    } finally {
      pool.close();
    }
  }
}
