package dev.thaw.examples;

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

/**
 * Checks that an example's checked-in PTX is what its {@code .cu} source compiles to, as its {@code build-*-ptx.sh}
 * compiles it ({@code nvcc -arch=compute_80 -ptx -O3}, from {@code src/main/cuda}). Skipped, with the reason, where
 * there is no nvcc or it is another release than the one that made the PTX.
 */
public final class PtxRegeneration {

  private static final Path SOURCES = Path.of("src/main/cuda");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [\\d.]+, V[\\d.]+");

  private PtxRegeneration() {}

  /**
   * @param source the {@code .cu} file's name in {@code src/main/cuda}, e.g. {@code probe.cu}
   * @param checkedIn the PTX the example loads
   * @param script the script that regenerates it, named in the failure
   */
  public static void assertCurrent(String source, String checkedIn, String script) throws Exception {
    String ptx = source.replace(".cu", ".ptx");
    Optional<Path> nvcc = Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
        .filter(dir -> !dir.isEmpty()).map(dir -> Path.of(dir, "nvcc")).filter(Files::isExecutable).findFirst();
    Assumptions.assumeTrue(nvcc.isPresent(), "nvcc is not on the PATH; cannot regenerate " + ptx);
    Path cu = SOURCES.resolve(source);
    Assumptions.assumeTrue(Files.isRegularFile(cu), () -> cu.toAbsolutePath() + " is not here");
    String version = run(SOURCES, nvcc.get().toString(), "--version");
    Matcher ours = RELEASE.matcher(checkedIn);
    Matcher theirs = RELEASE.matcher(version);
    assertTrue(ours.find(), ptx + " does not say which nvcc made it");
    Assumptions.assumeTrue(theirs.find() && theirs.group().equals(ours.group()),
        () -> ptx + " was made by '" + ours.group() + "'; this nvcc is another: " + version.strip());
    Path out = Files.createTempFile(source.replace(".cu", ""), ".ptx");
    try {
      // From the source folder with a relative name, as the scripts run it: nothing about this checkout is in the output.
      run(SOURCES, nvcc.get().toString(), "-arch=compute_80", "-ptx", "-O3", "-o", out.toString(), source);
      assertEquals(Files.readString(out, StandardCharsets.UTF_8), checkedIn,
          ptx + " is stale: run functions-examples/src/main/cuda/" + script + " and commit the result");
    } finally {
      Files.deleteIfExists(out);
    }
  }

  private static String run(Path dir, String... command) throws Exception {
    Process p = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), String.join(" ", command) + " did not finish");
    assertEquals(0, p.exitValue(), () -> String.join(" ", command) + " failed:\n" + out);
    return out;
  }
}
