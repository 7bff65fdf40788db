package dev.thaw.examples.mlp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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

/** The checked-in mlp.ptx is what mlp.cu compiles to, and it keeps the signature the sim device loads. */
class MlpPtxTest {

  private static final Path SOURCE = Path.of("src/main/cuda/mlp.cu");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [\\d.]+, V[\\d.]+");

  /** Compiles as build-mlp-ptx.sh does; skipped where there is no nvcc, or another release than the PTX's. */
  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    Optional<Path> nvcc = Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
        .filter(dir -> !dir.isEmpty()).map(dir -> Path.of(dir, "nvcc")).filter(Files::isExecutable).findFirst();
    Assumptions.assumeTrue(nvcc.isPresent(), "nvcc is not on the PATH; cannot regenerate mlp.ptx");
    Assumptions.assumeTrue(Files.isRegularFile(SOURCE), () -> SOURCE.toAbsolutePath() + " is not here");
    String checkedIn = MlpFunction.ptx();
    String version = run(nvcc.get().toString(), "--version");
    Matcher ours = RELEASE.matcher(checkedIn);
    Matcher theirs = RELEASE.matcher(version);
    assertTrue(ours.find(), "mlp.ptx does not say which nvcc made it");
    Assumptions.assumeTrue(theirs.find() && theirs.group().equals(ours.group()),
        () -> "mlp.ptx was made by '" + ours.group() + "'; this nvcc is another: " + version.strip());
    Path out = Files.createTempFile("mlp", ".ptx");
    try {
      run(nvcc.get().toString(), "-arch=compute_80", "-ptx", "-O3", "-o", out.toString(), SOURCE.toString());
      assertEquals(Files.readString(out, StandardCharsets.UTF_8), checkedIn,
          "mlp.ptx is stale: run functions-examples/src/main/cuda/build-mlp-ptx.sh and commit the result");
    } finally {
      Files.deleteIfExists(out);
    }
  }

  @Test
  void theSimReadsTheRealModule() {
    var info = dev.thaw.runtime.ptx.PtxEntries.parse(MlpFunction.ptx());
    assertEquals(8, info.entries().get("mlp_linear").count());
  }

  private static String run(String... command) throws Exception {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "nvcc did not finish");
    assertEquals(0, p.exitValue(), () -> String.join(" ", command) + " failed:\n" + out);
    return out;
  }
}
