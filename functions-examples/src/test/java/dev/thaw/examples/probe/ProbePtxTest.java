package dev.thaw.examples.probe;

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

/** The checked-in probe.ptx is what probe.cu compiles to, with the parameters the sim twin reads. */
class ProbePtxTest {

  private static final Path SOURCE = Path.of("src/main/cuda/probe.cu");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [\\d.]+, V[\\d.]+");

  /** Compiles as build-probe-ptx.sh does; skipped where there is no nvcc, or another release than the PTX's. */
  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    Optional<Path> nvcc = Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
        .filter(dir -> !dir.isEmpty()).map(dir -> Path.of(dir, "nvcc")).filter(Files::isExecutable).findFirst();
    Assumptions.assumeTrue(nvcc.isPresent(), "nvcc is not on the PATH; cannot regenerate probe.ptx");
    Assumptions.assumeTrue(Files.isRegularFile(SOURCE), () -> SOURCE.toAbsolutePath() + " is not here");
    String checkedIn = MemoryProbeFunction.ptx();
    String version = run(nvcc.get().toString(), "--version");
    Matcher ours = RELEASE.matcher(checkedIn);
    Matcher theirs = RELEASE.matcher(version);
    assertTrue(ours.find(), "probe.ptx does not say which nvcc made it");
    Assumptions.assumeTrue(theirs.find() && theirs.group().equals(ours.group()),
        () -> "probe.ptx was made by '" + ours.group() + "'; this nvcc is another: " + version.strip());
    Path out = Files.createTempFile("probe", ".ptx");
    try {
      Process p = new ProcessBuilder(nvcc.get().toString(), "-arch=compute_80", "-ptx", "-O3", "-o", out.toString(),
          "probe.cu").directory(SOURCE.getParent().toFile()).redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0, log);
      assertEquals(Files.readString(out, StandardCharsets.UTF_8), checkedIn,
          "probe.ptx is stale: run functions-examples/src/main/cuda/build-probe-ptx.sh and commit the result");
    } finally {
      Files.deleteIfExists(out);
    }
  }

  @Test
  void theSimReadsTheRealModule() {
    var entry = PtxEntries.parse(MemoryProbeFunction.ptx()).entries().get(ProbeSimKernels.Read.ENTRY);
    assertEquals(4, entry.count());
  }

  private static String run(String... command) throws Exception {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "nvcc did not finish");
    assertEquals(0, p.exitValue(), () -> String.join(" ", command) + " failed:\n" + out);
    return out;
  }
}
