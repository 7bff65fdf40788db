package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The kernel harness on the sim device (a compute capability 9.0 device, so the sm_90a module and its wgmma
 * tiles): at the small stand-in shape every kernel it times passes its checks, and the JSON names every product
 * tile, both flash prefill entries and the picked ones, as kernels_summary.py reads them.
 */
class LlamaKernelBenchTest {

  @Test
  void everyKernelIsCheckedAndRecorded(@TempDir Path dir) throws Exception {
    Path out = dir.resolve("bench.json");
    int rc = LlamaKernelBench.run(new String[] {"--shape", "small", "--rows", "16,72", "--prefill", "100",
        "--decode", "16,300", "--out", out.toString()});
    assertEquals(0, rc, "the bench's checks fail on the sim device");
    JsonNode doc = new ObjectMapper().readTree(out.toFile());
    assertEquals(0, doc.get("failures").asInt());
    Set<String> kernels = new HashSet<>();
    int picked = 0;
    for (JsonNode r : doc.get("results")) {
      kernels.add(r.get("kernel").asText());
      assertEquals("ok", r.get("check").asText(), r.toString());
      picked += r.path("picked").asBoolean() ? 1 : 0;
    }
    for (GemmTile t : GemmTile.values()) {
      assertTrue(kernels.contains(t.entry()), t.entry() + " not measured: " + kernels);
    }
    assertTrue(kernels.contains(LlamaKernels.FLASH_ATTENTION) && kernels.contains(LlamaKernels.FLASH_ATTENTION_WIDE),
        kernels.toString());
    assertTrue(picked > 0, "no result is marked as the one LlamaKernels picks");
  }
}
