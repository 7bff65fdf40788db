package dev.thaw.examples.gpt2.kernels;

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

/** The checked-in {@code gpt2.ptx} is what {@code build-ptx.sh} makes of {@code gpt2.cu} today. */
class Gpt2PtxTest {

  private static final Path SCRIPT = Path.of("src/main/cuda/build-ptx.sh");
  private static final Pattern RELEASE = Pattern.compile("Cuda compilation tools, release [^\\n]*");

  @Test
  void checkedInPtxIsUpToDate() throws Exception {
    Assumptions.assumeTrue(Files.isRegularFile(SCRIPT), "no sources here (run from the module folder): " + SCRIPT);
    String nvcc = findNvcc();
    Assumptions.assumeTrue(nvcc != null, "nvcc is not on the PATH");
    String checkedIn = Gpt2Kernels.ptx();
    String version = run(nvcc, "--version");
    String release = find(checkedIn);
    Assumptions.assumeTrue(release != null && version.contains(release),
        () -> "the checked-in PTX was made by '" + release + "'; this nvcc is another: " + version.trim());
    Path out = Files.createTempFile("gpt2", ".ptx");
    try {
      run("bash", SCRIPT.toString(), out.toString());
      String fresh = Files.readString(out, StandardCharsets.UTF_8);
      assertEquals(checkedIn, fresh, "gpt2.ptx is stale: run src/main/cuda/build-ptx.sh and commit it");
      for (String entry : new String[] {Gpt2Kernels.EMBED, Gpt2Kernels.LAYERNORM, Gpt2Kernels.MATMUL,
          Gpt2Kernels.MATMUL_RESIDUAL, Gpt2Kernels.KV_APPEND, Gpt2Kernels.ATTENTION, Gpt2Kernels.LM_HEAD,
          Gpt2Kernels.ARGMAX}) {
        assertTrue(fresh.contains(".visible .entry " + entry + "("), entry);
      }
    } finally {
      Files.deleteIfExists(out);
    }
  }

  private static String find(String ptx) {
    Matcher m = RELEASE.matcher(ptx);
    return m.find() ? m.group() : null;
  }

  private static String findNvcc() {
    String path = System.getenv("PATH");
    if (path == null) {
      return null;
    }
    for (String dir : path.split(File.pathSeparator)) {
      Path p = Path.of(dir, "nvcc");
      if (Files.isExecutable(p)) {
        return p.toString();
      }
    }
    return null;
  }

  private static String run(String... command) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
    String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new AssertionError(String.join(" ", command) + " failed:\n" + output);
    }
    return output;
  }
}
