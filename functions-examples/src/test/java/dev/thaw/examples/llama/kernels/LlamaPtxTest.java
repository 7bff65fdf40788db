package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * The checked-in {@code llama.ptx} and {@code llama_sm90a.ptx} are what {@code build-llama-ptx.sh} makes of
 * {@code llama.cu} today; the first assembles for sm_90 (H100/H200) and sm_80, the second for sm_90a with every
 * entry of the first and the wgmma products, none of them spilling registers.
 */
class LlamaPtxTest {

  private static final Path SCRIPT = Path.of("src/main/cuda/build-llama-ptx.sh");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [^\\n]*");
  private static final Pattern SPILLS = Pattern.compile("(\\d+) bytes spill stores, (\\d+) bytes spill loads");

  @Test
  void checkedInPtxIsUpToDateAndAssembles() throws Exception {
    Assumptions.assumeTrue(Files.isRegularFile(SCRIPT), "no sources here (run from the module folder): " + SCRIPT);
    Path nvcc = tool("nvcc");
    Assumptions.assumeTrue(nvcc != null, "nvcc is not on the PATH");
    String checkedIn = LlamaKernels.ptx();
    String version = run(nvcc.toString(), "--version");
    String release = find(checkedIn);
    Assumptions.assumeTrue(release != null && version.contains(release),
        () -> "the checked-in PTX was made by '" + release + "'; this nvcc is another: " + version.trim());
    Path dir = Files.createTempDirectory("llama-ptx");
    Path cubin = dir.resolve("llama.cubin");
    try {
      run("bash", SCRIPT.toString(), dir.toString());
      String fresh = Files.readString(dir.resolve("llama.ptx"), StandardCharsets.UTF_8);
      String freshHopper = Files.readString(dir.resolve("llama_sm90a.ptx"), StandardCharsets.UTF_8);
      assertEquals(checkedIn, fresh, "llama.ptx is stale: run src/main/cuda/build-llama-ptx.sh and commit it");
      assertEquals(LlamaKernels.hopperPtx(), freshHopper,
          "llama_sm90a.ptx is stale: run src/main/cuda/build-llama-ptx.sh and commit it");
      for (String entry : LlamaKernels.ENTRIES) {
        assertTrue(fresh.contains(".visible .entry " + entry + "("), entry);
        assertTrue(freshHopper.contains(".visible .entry " + entry + "("), entry);
      }
      for (String entry : LlamaKernels.HOPPER_ENTRIES) {
        assertFalse(fresh.contains(".visible .entry " + entry + "("), entry + " only in the sm_90a build");
        assertTrue(freshHopper.contains(".visible .entry " + entry + "("), entry);
      }
      Path ptxas = tool("ptxas");
      if (ptxas != null) {
        for (String arch : new String[] {"sm_90", "sm_80"}) {
          assertNoSpills(run(ptxas.toString(), "-arch=" + arch, "-v", dir.resolve("llama.ptx").toString(), "-o",
              cubin.toString()), arch);
        }
        assertNoSpills(run(ptxas.toString(), "-arch=sm_90a", "-v", dir.resolve("llama_sm90a.ptx").toString(),
            "-o", cubin.toString()), "sm_90a");
      }
    } finally {
      try (var files = Files.list(dir)) {
        for (Path f : files.toList()) {
          Files.delete(f);
        }
      }
      Files.delete(dir);
    }
  }

  /** ptxas -v says, per function, "N bytes spill stores": every N is 0. */
  private static void assertNoSpills(String log, String arch) {
    Matcher m = SPILLS.matcher(log);
    int functions = 0;
    while (m.find()) {
      functions++;
      assertEquals("0", m.group(1), "a kernel spills registers on " + arch + ":\n" + log);
      assertEquals("0", m.group(2), "a kernel spills registers on " + arch + ":\n" + log);
    }
    assertTrue(functions > 0, "ptxas -v printed no spill counts:\n" + log);
    assertFalse(log.contains("wgmma.mma_async instructions are serialized"), "wgmma serialized on " + arch
        + ":\n" + log);
  }

  private static String find(String ptx) {
    Matcher m = RELEASE.matcher(ptx);
    return m.find() ? m.group() : null;
  }

  private static Path tool(String name) {
    String path = System.getenv("PATH");
    for (String dir : path == null ? new String[0] : path.split(File.pathSeparator)) {
      Path p = Path.of(dir, name);
      if (Files.isExecutable(p)) {
        return p;
      }
    }
    return null;
  }

  private static String run(String... command) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new AssertionError(String.join(" ", command) + " failed:\n" + output);
    }
    return output;
  }
}
