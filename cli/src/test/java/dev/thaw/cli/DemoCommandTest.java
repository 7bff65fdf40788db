package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code thaw demo}, the README's main command: the whole cycle on the real store, on the sim device. */
class DemoCommandTest {

  @TempDir
  Path dir;

  @Test
  void buildsServesAndInvokesTheExampleColdThenWarmOverHttpAndDedupsOnTheSecondRun() {
    ThawCli cli = new ThawCli(Map.of("THAW_STORE", dir.resolve("store").toString()), GpuDrivers::open);
    ThawCliTest.Run first = ThawCliTest.run(cli, "demo", "--device", "sim");
    assertEquals(0, first.exit(), first.out() + first.err());
    assertTrue(first.out().contains("1. built demo:mlp"), first.out());
    assertTrue(first.out().contains("profile: 1 exact, 0 unsafe"), first.out());
    assertTrue(first.out().contains("3. cold invoke over HTTP"), first.out());
    assertTrue(first.out().contains("(Thaw-Start: cold)"), first.out());
    assertTrue(first.out().contains("(Thaw-Start: warm)"), first.out());
    for (String phase : new String[] {"queue", "acquire", "map", "restore-wait", "invoke"}) {
      assertTrue(first.out().contains(phase), phase + " in " + first.out());
    }
    assertTrue(first.out().contains("responses identical to the build's"), first.out());
    assertTrue(first.out().contains("SIMULATED device"), first.out());
    // The closing hint's curl sends a file that exists: the demo's own request, which the image knows.
    Matcher hint = Pattern.compile("thaw serve --function mlp=demo:mlp\n  curl .* -d @(\\S+)\n").matcher(first.out());
    assertTrue(hint.find(), first.out());
    Path request = Path.of(hint.group(1));
    assertTrue(Files.isRegularFile(request), request.toString());
    ThawCliTest.Run check = ThawCliTest.run(cli, "run", "demo:mlp", "--device", "sim", "--request", request.toString(),
        "--check");
    assertEquals(0, check.exit(), check.out() + check.err());
    assertTrue(check.out().contains("response identical"), check.out());

    ThawCliTest.Run second = ThawCliTest.run(cli, "demo", "--device", "sim");
    assertEquals(0, second.exit(), second.out() + second.err());
    assertTrue(second.out().contains("0 B new in the store"), "a rebuild of the same image adds nothing: " + second.out());
    ThawCliTest.Run images = ThawCliTest.run(cli, "images");
    assertTrue(images.out().contains("demo:mlp"), images.out());
  }
}
