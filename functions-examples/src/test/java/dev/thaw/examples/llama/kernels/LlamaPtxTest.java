package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
 * The checked-in {@code llama.ptx} is what {@code build-llama-ptx.sh} makes of {@code llama.cu} today, and it
 * assembles for sm_90 (H100/H200) and sm_80.
 */
class LlamaPtxTest {

  private static final Path SCRIPT = Path.of("src/main/cuda/build-llama-ptx.sh");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [^\\n]*");

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
    Path out = Files.createTempFile("llama", ".ptx");
    Path cubin = Files.createTempFile("llama", ".cubin");
    try {
      run("bash", SCRIPT.toString(), out.toString());
      String fresh = Files.readString(out, StandardCharsets.UTF_8);
      assertEquals(checkedIn, fresh, "llama.ptx is stale: run src/main/cuda/build-llama-ptx.sh and commit it");
      for (String entry : LlamaKernels.ENTRIES) {
        assertTrue(fresh.contains(".visible .entry " + entry + "("), entry);
      }
      Path ptxas = tool("ptxas");
      if (ptxas != null) {
        for (String arch : new String[] {"sm_90", "sm_80"}) {
          run(ptxas.toString(), "-arch=" + arch, out.toString(), "-o", cubin.toString());
        }
      }
    } finally {
      Files.deleteIfExists(out);
      Files.deleteIfExists(cubin);
    }
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
