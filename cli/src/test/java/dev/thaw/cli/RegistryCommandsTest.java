package dev.thaw.cli;

import static dev.thaw.cli.ThawCliTest.assertOneLineError;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.cli.ThawCliTest.Run;
import dev.thaw.image.registry.TestRegistry;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins {@code thaw push}, {@code thaw pull} and {@code thaw run REF} end to end on the real RocksDB store and a
 * real registry (Debian's docker-registry on loopback; skipped with the reason when it cannot run): a pushed
 * image pulls into an empty store, a run from a registry reference restores byte-identical and leaves the image
 * committed, and bad references and unreachable registries are one-line errors.
 */
class RegistryCommandsTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  static Path dir;

  private static TestRegistry registry;
  private static Path request;

  @BeforeAll
  static void start() throws Exception {
    registry = TestRegistry.start(dir.resolve("registry"), null);
    request = Files.writeString(dir.resolve("req.json"), "{\"a\": 2.5}");
  }

  @AfterAll
  static void stop() throws Exception {
    if (registry != null) {
      registry.close();
    }
  }

  private static Run thaw(String store, String... args) {
    return ThawCliTest.run(new ThawCli(Map.of("THAW_STORE", dir.resolve(store).toString()), GpuDrivers::open), args);
  }

  @Test
  void pushPullAndRunFromAReference() throws Exception {
    Run built = thaw("a", "build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 3000, \"seed\": 3}", "--tag", "saxpy:1", "--sample-request", request.toString());
    assertEquals(0, built.exit(), built.err());
    String ref = registry.address() + "/thaw/saxpy:1";

    Run pushed = thaw("a", "push", "saxpy:1", ref, "--json");
    assertEquals(0, pushed.exit(), pushed.err());
    JsonNode p = JSON.readTree(pushed.out());
    assertTrue(p.path("uploaded").asInt() > 0 && p.path("manifestDigest").asText().startsWith("sha256:"), pushed.out());
    Run again = thaw("a", "push", "saxpy:1", ref);
    assertEquals(0, again.exit(), again.err());
    assertTrue(again.out().contains("0 uploaded (0 B sent)"), again.out());

    Run pulled = thaw("b", "pull", ref);
    assertEquals(0, pulled.exit(), pulled.err());
    assertTrue(pulled.out().contains("as saxpy:1"), pulled.out());
    Run check = thaw("b", "run", "saxpy:1", "--device", "sim", "--request", request.toString(), "--check");
    assertEquals(0, check.exit(), check.out() + check.err());

    Run lazy = thaw("c", "run", ref, "--device", "sim", "--request", request.toString(), "--check");
    assertEquals(0, lazy.exit(), lazy.out() + lazy.err());
    assertTrue(lazy.out().contains("pulled lazily from " + ref) && lazy.out().contains("byte-identical"),
        lazy.out());
    Run images = thaw("c", "images");
    assertTrue(images.out().contains("saxpy:1"), images.out());
  }

  @Test
  void progressGoesToStderrWhenAskedAndNeverIntoTheOutput() throws Exception {
    Run built = thaw("p", "build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 3000, \"seed\": 4}", "--tag", "saxpy:2");
    assertEquals(0, built.exit(), built.err());
    String ref = registry.address() + "/thaw/progress:1";
    PrintStream err = System.err;
    ByteArrayOutputStream quiet = new ByteArrayOutputStream();
    ByteArrayOutputStream shown = new ByteArrayOutputStream();
    Run pushed;
    Run pulled;
    try {
      // No terminal here: no progress unless asked for.
      System.setErr(new PrintStream(quiet, true, StandardCharsets.UTF_8));
      assertEquals(0, thaw("p", "push", "saxpy:2", registry.address() + "/thaw/quiet:1").exit());
      System.setErr(new PrintStream(shown, true, StandardCharsets.UTF_8));
      pushed = thaw("p", "push", "saxpy:2", ref, "--json", "--progress");
      pulled = thaw("q", "pull", ref, "--json", "--progress");
    } finally {
      System.setErr(err);
    }
    assertEquals(0, pushed.exit(), pushed.err());
    assertEquals(0, pulled.exit(), pulled.err());
    assertTrue(JSON.readTree(pushed.out()).path("manifestDigest").asText().startsWith("sha256:"), pushed.out());
    assertTrue(JSON.readTree(pulled.out()).path("manifestDigest").asText().startsWith("sha256:"), pulled.out());
    String bars = shown.toString(StandardCharsets.UTF_8);
    assertTrue(bars.contains("push") && bars.contains("pull") && bars.contains("MiB"), bars);
    assertEquals("", quiet.toString(StandardCharsets.UTF_8));
  }

  @Test
  void anImageTheRegistryDoesNotHaveIsFourAsAMissingTagIs() throws Exception {
    Run missing = thaw("e", "pull", registry.address() + "/thaw/never-pushed:1");
    assertEquals(ThawCli.EXIT_NOT_FOUND, missing.exit(), missing.err());
    assertOneLineError(missing, "never-pushed");
    Path req = Files.writeString(dir.resolve("r.json"), "{\"a\": 1}");
    Run run = thaw("e", "run", registry.address() + "/thaw/never-pushed:1", "--device", "sim", "--request",
        req.toString());
    assertEquals(ThawCli.EXIT_NOT_FOUND, run.exit(), run.err());
  }

  @Test
  void badReferencesAreUsageErrorsAndAnUnreachableRegistryIsOneLine() throws Exception {
    Run bad = thaw("d", "pull", "no-registry-host/x:1");
    assertEquals(ThawCli.EXIT_USAGE, bad.exit());
    assertOneLineError(bad, "registry host");
    int port;
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    Run down = thaw("d", "pull", "127.0.0.1:" + port + "/thaw/x:1", "--transfers", "1");
    assertEquals(ThawCli.EXIT_FAILED, down.exit());
    assertOneLineError(down, "127.0.0.1:" + port);
    // The failed pull created store d (a pull creates its store, as a build does); it has no such image.
    Run missing = thaw("d", "push", "nothing:here", registry.address() + "/thaw/x:1");
    assertEquals(ThawCli.EXIT_NOT_FOUND, missing.exit());
  }
}
