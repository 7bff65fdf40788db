package dev.thaw.examples.wait;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.runtime.ptx.PtxEntries;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** The checked-in wait.ptx is what wait.cu compiles to, with the parameters the sim twin reads. */
class WaitPtxTest {

  private static final Path SOURCE = Path.of("src/main/cuda/wait.cu");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [\\d.]+, V[\\d.]+");

  /** Compiles as build-wait-ptx.sh does; skipped where there is no nvcc, or another release than the PTX's. */
  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    Optional<Path> nvcc = Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
        .filter(dir -> !dir.isEmpty()).map(dir -> Path.of(dir, "nvcc")).filter(Files::isExecutable).findFirst();
    Assumptions.assumeTrue(nvcc.isPresent(), "nvcc is not on the PATH; cannot regenerate wait.ptx");
    Assumptions.assumeTrue(Files.isRegularFile(SOURCE), () -> SOURCE.toAbsolutePath() + " is not here");
    String checkedIn = WaitFunction.ptx();
    String version = run(nvcc.get().toString(), "--version");
    Matcher ours = RELEASE.matcher(checkedIn);
    Matcher theirs = RELEASE.matcher(version);
    assertTrue(ours.find(), "wait.ptx does not say which nvcc made it");
    Assumptions.assumeTrue(theirs.find() && theirs.group().equals(ours.group()),
        () -> "wait.ptx was made by '" + ours.group() + "'; this nvcc is another: " + version.strip());
    Path out = Files.createTempFile("wait", ".ptx");
    try {
      Process p = new ProcessBuilder(nvcc.get().toString(), "-arch=compute_80", "-ptx", "-O3", "-o", out.toString(),
          "wait.cu").directory(SOURCE.getParent().toFile()).redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0, log);
      assertEquals(Files.readString(out, StandardCharsets.UTF_8), checkedIn,
          "wait.ptx is stale: run functions-examples/src/main/cuda/build-wait-ptx.sh and commit the result");
    } finally {
      Files.deleteIfExists(out);
    }
  }

  @Test
  void theSimReadsTheRealModule() {
    var entry = PtxEntries.parse(WaitFunction.ptx()).entries().get(WaitSimKernels.Wait.ENTRY);
    assertEquals(2, entry.count());
  }

  private static String run(String... command) throws Exception {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "nvcc did not finish");
    assertEquals(0, p.exitValue(), () -> String.join(" ", command) + " failed:\n" + out);
    return out;
  }
}
