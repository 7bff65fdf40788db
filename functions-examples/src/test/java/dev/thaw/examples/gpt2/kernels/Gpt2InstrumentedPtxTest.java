package dev.thaw.examples.gpt2.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.runtime.ptx.instrument.InstrumentedModule;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** The instrumented GPT-2 module (all 8 kernels) must assemble with ptxas for sm_90 and sm_80. */
class Gpt2InstrumentedPtxTest {

  @Test
  void allEightKernelsInstrumentAndAssemble() throws Exception {
    InstrumentedModule m = PtxInstrumenter.instrument(Gpt2Kernels.ptx());
    assertEquals(List.of(Gpt2Kernels.EMBED, Gpt2Kernels.LAYERNORM, Gpt2Kernels.MATMUL, Gpt2Kernels.MATMUL_RESIDUAL,
        Gpt2Kernels.KV_APPEND, Gpt2Kernels.ATTENTION, Gpt2Kernels.LM_HEAD, Gpt2Kernels.ARGMAX), m.kernels());
    for (String kernel : m.kernels()) {
      if (m.sitesOf(kernel).isEmpty()) {
        throw new AssertionError(kernel + " has no checked access");
      }
    }
    Path ptxas = ptxas();
    Assumptions.assumeTrue(ptxas != null, "ptxas is not on the PATH");
    Path dir = Files.createTempDirectory("thaw-gpt2-ptxas");
    Path in = dir.resolve("gpt2.instrumented.ptx");
    Files.writeString(in, m.ptx());
    for (String arch : List.of("sm_90", "sm_80")) {
      Path out = dir.resolve(arch + ".cubin");
      Process p = new ProcessBuilder(ptxas.toString(), "-arch=" + arch, in.toString(), "-o", out.toString())
          .redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new AssertionError("ptxas -arch=" + arch + " rejects the instrumented GPT-2 module:\n" + log);
      }
      Files.delete(out);
    }
    Files.delete(in);
    Files.delete(dir);
  }

  private static Path ptxas() {
    String path = System.getenv("PATH");
    for (String d : path == null ? new String[0] : path.split(File.pathSeparator)) {
      Path p = Path.of(d, "ptxas");
      if (Files.isExecutable(p)) {
        return p;
      }
    }
    return null;
  }
}
