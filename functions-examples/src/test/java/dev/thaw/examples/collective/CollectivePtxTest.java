package dev.thaw.examples.collective;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.PtxRegeneration;
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

/**
 * The checked-in collective.ptx is what collective.cu compiles to, assembles for sm_90 (H100/H200) without spills, and
 * has the parameters the sim twins read; and it never asks for NVLink multicast (the GPU hosts must leave it off).
 */
class CollectivePtxTest {

  private static final Pattern SPILLS = Pattern.compile("(\\d+) bytes spill stores, (\\d+) bytes spill loads");

  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    PtxRegeneration.assertCurrent("collective.cu", CollectiveKernels.ptx(), "build-collective-ptx.sh");
  }

  @Test
  void theSimTwinsReadTheRealModulesParameters() {
    var entries = PtxEntries.parse(CollectiveKernels.ptx()).entries();
    assertEquals(8, entries.get(CollectiveKernels.ALL_REDUCE_ADD).count());
    assertEquals(8, entries.get(CollectiveKernels.ALL_GATHER_COLUMNS).count());
    assertEquals(CollectiveKernels.ENTRIES.size(), entries.size());
  }

  @Test
  void noKernelUsesMulticastMemory() {
    String ptx = CollectiveKernels.ptx();
    assertTrue(!ptx.contains("multimem") && !ptx.contains(".multicast"), "collective.ptx uses NVLink multicast");
  }

  @Test
  void itAssemblesForSm90WithoutSpills() throws Exception {
    Optional<Path> ptxas = Stream.of(System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
        .filter(dir -> !dir.isEmpty()).map(dir -> Path.of(dir, "ptxas")).filter(Files::isExecutable).findFirst();
    Assumptions.assumeTrue(ptxas.isPresent(), "ptxas is not on the PATH");
    Path dir = Files.createTempDirectory("thaw-collective-ptxas");
    Path in = dir.resolve("collective.ptx");
    Path out = dir.resolve("collective.cubin");
    try {
      Files.writeString(in, CollectiveKernels.ptx());
      Process p = new ProcessBuilder(ptxas.get().toString(), "-arch=sm_90", "-v", in.toString(), "-o",
          out.toString()).redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0, "ptxas -arch=sm_90 rejects it:\n" + log);
      Matcher m = SPILLS.matcher(log);
      int functions = 0;
      while (m.find()) {
        functions++;
        assertEquals("0", m.group(1), log);
        assertEquals("0", m.group(2), log);
      }
      assertEquals(CollectiveKernels.ENTRIES.size(), functions, log);
    } finally {
      Files.deleteIfExists(in);
      Files.deleteIfExists(out);
      Files.delete(dir);
    }
  }
}
