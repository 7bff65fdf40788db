package dev.thaw.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.examples.collective.CollectiveKernels;
import dev.thaw.examples.gpt2.kernels.Gpt2Kernels;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.mlp.MlpFunction;
import dev.thaw.examples.probe.MemoryProbeFunction;
import dev.thaw.examples.probe.ProbeSimKernels;
import dev.thaw.examples.wait.WaitFunction;
import dev.thaw.examples.wait.WaitSimKernels;
import dev.thaw.runtime.ptx.instrument.InstrumentedModule;
import dev.thaw.runtime.ptx.instrument.PtxInstrumenter;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Every example module can be instrumented for GPU validation — every kernel with checked accesses — and the
 * instrumented module assembles with ptxas for sm_90 and sm_80 (Llama's sm_90a build, with its wgmma products,
 * for sm_90a).
 */
class InstrumentedExamplesPtxTest {

  @ParameterizedTest
  @ValueSource(strings = {"collective", "gpt2", "llama", "llama_sm90a", "mlp", "probe", "wait"})
  void everyKernelInstrumentsAndAssembles(String example) throws Exception {
    String ptx = switch (example) {
      case "collective" -> CollectiveKernels.ptx();
      case "gpt2" -> Gpt2Kernels.ptx();
      case "llama" -> LlamaKernels.ptx();
      case "llama_sm90a" -> LlamaKernels.hopperPtx();
      case "probe" -> MemoryProbeFunction.ptx();
      case "wait" -> WaitFunction.ptx();
      default -> MlpFunction.ptx();
    };
    List<String> kernels = switch (example) {
      case "collective" -> CollectiveKernels.ENTRIES;
      case "gpt2" -> List.of(Gpt2Kernels.EMBED, Gpt2Kernels.LAYERNORM, Gpt2Kernels.MATMUL,
          Gpt2Kernels.MATMUL_RESIDUAL, Gpt2Kernels.KV_APPEND, Gpt2Kernels.ATTENTION, Gpt2Kernels.LM_HEAD,
          Gpt2Kernels.ARGMAX);
      case "llama" -> LlamaKernels.ENTRIES;
      case "llama_sm90a" -> Stream.concat(LlamaKernels.ENTRIES.stream(), LlamaKernels.HOPPER_ENTRIES.stream())
          .toList();
      case "probe" -> List.of(ProbeSimKernels.Read.ENTRY, ProbeSimKernels.Write.ENTRY);
      case "wait" -> List.of(WaitSimKernels.Wait.ENTRY);
      default -> List.of("mlp_linear");
    };
    InstrumentedModule m = PtxInstrumenter.instrument(ptx);
    assertEquals(Set.copyOf(kernels), Set.copyOf(m.kernels()));
    for (String kernel : m.kernels()) {
      if (m.sitesOf(kernel).isEmpty()) {
        throw new AssertionError(kernel + " has no checked access");
      }
    }
    Path ptxas = ptxas();
    Assumptions.assumeTrue(ptxas != null, "ptxas is not on the PATH");
    Path dir = Files.createTempDirectory("thaw-" + example + "-ptxas");
    Path in = dir.resolve(example + ".instrumented.ptx");
    Files.writeString(in, m.ptx());
    for (String arch : example.endsWith("sm90a") ? List.of("sm_90a") : List.of("sm_90", "sm_80")) {
      Path out = dir.resolve(arch + ".cubin");
      Process p = new ProcessBuilder(ptxas.toString(), "-arch=" + arch, in.toString(), "-o", out.toString())
          .redirectErrorStream(true).start();
      String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
        throw new AssertionError("ptxas -arch=" + arch + " rejects the instrumented " + example + " module:\n" + log);
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
