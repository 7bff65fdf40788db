package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.llama.LlamaShard.Weight;
import dev.thaw.runtime.function.InvalidConfigException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The tensor-parallel bench: one rank's share of a model as a model of its own has exactly the rank's layer products
 * (so timing it alone against the split model times the exchanges), is half of Qwen2.5-32B at two ranks, and the bench
 * runs on the simulated device and records its clocks.
 */
class LlamaTensorParallelBenchTest {

  @Test
  void oneRanksShareAsAModelHasTheRanksLayerProductsAndIsHalfTheModelAtTwoRanks() {
    LlamaConfig qwen = LlamaConfig.named("qwen2.5-32b");
    LlamaConfig twin = LlamaTensorParallelBench.rankTwin(qwen, 2);
    assertEquals(0.5, (double) twin.parameterCount() / qwen.parameterCount(), 0.001);
    for (int ranks : new int[] {2, 4}) {
      LlamaConfig share = LlamaTensorParallelBench.rankTwin(qwen, ranks);
      Map<String, Long> rank = new HashMap<>();
      for (Weight w : new LlamaShard(qwen, ranks - 1, ranks).weights()) {
        rank.put(w.name(), w.bytes());
      }
      List<LlamaFunction.DeviceWeight> alone = LlamaFunction.deviceWeights(share);
      for (LlamaFunction.DeviceWeight w : alone) {
        if (w.name().startsWith("model.layers.") || w.name().equals("lm_head.weight")) {
          assertEquals(rank.get(w.name()), w.bytes(), w.name() + " at " + ranks + " ranks");
        }
      }
    }
    assertThrows(InvalidConfigException.class, () -> LlamaTensorParallelBench.rankTwin(qwen, 3));
  }

  @Test
  void theBenchRunsOnTheSimulatedDeviceAndRecordsItsClocks(@TempDir Path dir) throws Exception {
    Path out = dir.resolve("bench.json");
    int rc = LlamaTensorParallelBench.run(new String[] {"--shape", "tiny", "--ranks", "2", "--rank-twin",
        "--prefill", "12,20", "--decode-steps", "3", "--reps", "1", "--out", out.toString()});
    assertEquals(0, rc);
    JsonNode doc = new ObjectMapper().readTree(out.toFile());
    assertEquals("tiny-rank-of-2", doc.get("model").asText());
    assertEquals(1, doc.get("ranks").asInt());
    assertEquals(2, doc.get("prefill").size());
    assertTrue(doc.get("decode_ms_per_token").asDouble() > 0, doc.toString());
    assertEquals(2, LlamaTensorParallelBench.run(new String[] {"--shape", "tiny", "--bogus", "1"}));
  }
}
