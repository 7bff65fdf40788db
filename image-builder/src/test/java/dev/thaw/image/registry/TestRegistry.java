package dev.thaw.image.registry;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;

/**
 * A real OCI registry for tests: Debian's {@code docker-registry} (the CNCF distribution registry), installed if
 * missing and started on a free loopback port by {@code scripts/test-registry.sh}. When it cannot be installed or
 * started, the calling test is skipped with the script's reason (printed to stderr as well, so the build log shows
 * it).
 */
public final class TestRegistry implements AutoCloseable {

  private final Path script;
  private final Path dir;
  private final String address;

  private TestRegistry(Path script, Path dir, String address) {
    this.script = script;
    this.dir = dir;
    this.address = address;
  }

  /**
   * Starts one in {@code dir}; with {@code login} ({@code user:password}) it asks for basic auth.
   * Skips the test (an aborted assumption) when it cannot.
   */
  public static TestRegistry start(Path dir, String login) throws IOException, InterruptedException {
    Path script = findScript();
    ProcessBuilder pb = login == null
        ? new ProcessBuilder("bash", script.toString(), "start", dir.toString())
        : new ProcessBuilder("bash", script.toString(), "start", dir.toString(), login);
    Path err = Files.createTempFile(dir.getParent(), "registry", ".err");
    Process p = pb.redirectError(err.toFile()).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
    boolean done = p.waitFor(5, TimeUnit.MINUTES);
    String why = Files.readString(err).trim();
    if (!done || p.exitValue() != 0 || out.isEmpty()) {
      p.destroyForcibly();
      String reason = "SKIPPED: no real OCI registry: " + (why.isEmpty() ? "test-registry.sh exited "
          + (done ? p.exitValue() : "after 5 minutes") : why.lines().reduce((a, b) -> b).orElse(why));
      System.err.println(reason);
      Assumptions.abort(reason);
    }
    return new TestRegistry(script, dir, out.lines().reduce((a, b) -> b).orElseThrow());
  }

  private static Path findScript() {
    for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
      Path s = p.resolve("scripts/test-registry.sh");
      if (Files.isRegularFile(s)) {
        return s;
      }
    }
    Assumptions.abort("SKIPPED: scripts/test-registry.sh not found above " + Path.of("").toAbsolutePath());
    throw new IllegalStateException("unreachable");
  }

  /** {@code 127.0.0.1:PORT}. */
  public String address() {
    return address;
  }

  public RegistryReference reference(String repositoryAndTag) {
    return RegistryReference.parse(address + "/" + repositoryAndTag);
  }

  @Override
  public void close() throws IOException, InterruptedException {
    new ProcessBuilder("bash", script.toString(), "stop", dir.toString()).inheritIO().start().waitFor(30,
        TimeUnit.SECONDS);
  }
}
