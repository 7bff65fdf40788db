package dev.thaw.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Pins "no orphans": a parent killed with SIGKILL (no shutdown hook runs) takes all its workers with it. */
class ParentKilledTest {

  @TempDir Path dir;

  @Test
  void workersExitWhenTheirParentIsKilled() throws Exception {
    String javaBin = ProcessHandle.current().info().command().orElse("java");
    Process parent = new ProcessBuilder(javaBin, "-XX:+UseSerialGC", "-Xmx256m", "-cp",
        System.getProperty("java.class.path"), PoolParentMain.class.getName())
        .redirectError(dir.resolve("parent.log").toFile()).start();
    List<Long> workers = new ArrayList<>();
    try {
      BufferedReader out = new BufferedReader(new InputStreamReader(parent.getInputStream(), StandardCharsets.UTF_8));
      String line = out.readLine();
      assertTrue(line != null && line.startsWith("pids "), "parent said: " + line + "\n"
          + Files.readString(dir.resolve("parent.log")));
      String[] words = line.split(" ");
      for (int i = 1; i < words.length && !words[i].equals("held"); i++) {
        workers.add(Long.parseLong(words[i]));
      }
      assertEquals(3, workers.size(), line);
      for (long pid : workers) {
        assertTrue(PoolTesting.alive(pid), "worker " + pid + " alive before the kill");
      }
    } finally {
      parent.destroyForcibly();
      assertTrue(parent.waitFor(60, TimeUnit.SECONDS));
    }
    assertEquals(137, parent.exitValue(), "killed by SIGKILL");
    for (long pid : workers) {
      PoolTesting.awaitExit(pid);
    }
  }
}
