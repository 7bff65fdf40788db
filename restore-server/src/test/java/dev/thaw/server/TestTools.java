package dev.thaw.server;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;

/**
 * Command-line tools some tests run (wrk, promtool): found on the PATH, else installed by the project's
 * {@code scripts/install-test-tools.sh}; a test that cannot get one is skipped with the reason.
 */
public final class TestTools {

  private TestTools() {}

  /** {@code tool}, on the PATH now; skips the calling test, saying why, when it is not and cannot be installed. */
  public static String require(String tool) throws Exception {
    if (onPath(tool)) {
      return tool;
    }
    Path installer = Stream.of(Path.of("scripts", "install-test-tools.sh"), Path.of("..", "scripts",
        "install-test-tools.sh")).filter(Files::isExecutable).findFirst().orElse(null);
    Assumptions.assumeTrue(installer != null,
        tool + " is not installed and scripts/install-test-tools.sh is not found");
    Process p = new ProcessBuilder(installer.toString(), tool).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    boolean done = p.waitFor(5, TimeUnit.MINUTES);
    Assumptions.assumeTrue(done && p.exitValue() == 0 && onPath(tool),
        tool + " is not installed and could not be: " + out.strip());
    return tool;
  }

  static boolean onPath(String tool) {
    String path = System.getenv("PATH");
    if (path == null) {
      return false;
    }
    for (String d : path.split(":")) {
      if (Files.isExecutable(Path.of(d, tool))) {
        return true;
      }
    }
    return false;
  }
}
