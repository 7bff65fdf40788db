package dev.thaw.examples.llama;

import static dev.thaw.examples.transformer.ReferenceFiles.JSON;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.transformer.ReferenceFiles;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The GPU comparison's verdicts, run on the sim device against the CPU reference standing in for transformers. */
class LlamaCompareTest {

  @TempDir Path dir;

  private ObjectNode reference(int[][] prompts, int newTokens) throws Exception {
    SeededLlamaWeights weights = new SeededLlamaWeights(LlamaConfig.named("tiny"), 9);
    LlamaCheckpoint.save(weights, dir.resolve("hf"), 1);
    LlamaReference ref = LlamaReference.load(weights);
    ObjectNode r = ReferenceFiles.reference(prompts, newTokens, ref.generate(prompts, 0).logits(),
        ref.generate(prompts, newTokens).tokens());
    r.putObject("timing_ms").put("decode_ms_per_token", 1.0).put("prefill_ms", 1.0);
    return r;
  }

  private int compare(JsonNode reference, String name, String... extra) throws Exception {
    Path file = dir.resolve(name + ".json");
    JSON.writeValue(file.toFile(), reference);
    String[] base = {"--dir", dir.resolve("hf").toString(), "--reference", file.toString(), "--out",
        dir.resolve(name + "-summary.json").toString(), "--runs", "1"};
    String[] args = new String[base.length + extra.length];
    System.arraycopy(base, 0, args, 0, base.length);
    System.arraycopy(extra, 0, args, base.length, extra.length);
    return LlamaCompare.run(args);
  }

  @Test
  void passesTheRightAnswerFailsAWrongOneAndForgivesANearTie() throws Exception {
    ObjectNode ref = reference(new int[][] {{1, 2, 3, 4, 5, 6}, {60, 50, 40, 30, 20, 10}}, 5);
    assertEquals(0, compare(ref, "right", "--decode-tokens", "2", "--prefill", "20"));
    JsonNode summary = JSON.readTree(dir.resolve("right-summary.json").toFile());
    assertTrue(summary.get("pass").asBoolean());
    assertTrue(summary.get("timing_ms").has("decode_ms_per_token"));
    assertTrue(summary.get("timing_ms").get("prefill_ms").asDouble() > 0);
    // The forward by prompt length and decode by context, as forward-run.sh asks for them.
    assertEquals(0, compare(ref, "bench", "--decode-tokens", "2", "--decode-contexts", "4,30", "--prefill",
        "9,40"));
    JsonNode bench = JSON.readTree(dir.resolve("bench-summary.json").toFile()).get("timing_ms");
    assertEquals(2, bench.get("prefill_ms_by_tokens").size());
    assertTrue(bench.get("prefill_ms_by_tokens").get("40").asDouble() > 0);
    assertTrue(bench.get("decode_ms_per_token_by_context").has("30"));
    assertEquals(2, compare(ref, "nonsense", "--prefill", "0,-3"));

    ObjectNode badLogits = ReferenceFiles.assertVerdicts(ref, this::compare);
    // The same wrong bf16 reference, with the fp32 truth beside it that Thaw is close to: Thaw is the better one.
    badLogits.set("forward_logits_fp32", ref.get("forward_logits"));
    assertEquals(0, compare(badLogits, "fp32"));
    JsonNode fp32Summary = JSON.readTree(dir.resolve("fp32-summary.json").toFile());
    assertTrue(fp32Summary.get("checks").get(0).get("thaw_rel_l2_vs_fp32").asDouble() < 1e-2);
    // And an fp32 truth far from Thaw does not rescue a wrong answer.
    ObjectNode farTruth = badLogits.deepCopy();
    ArrayNode truth = (ArrayNode) farTruth.get("forward_logits_fp32").get(0);
    for (int v = 0; v < truth.size(); v++) {
      truth.set(v, -truth.get(v).asDouble());
    }
    assertEquals(1, compare(farTruth, "far"));
  }
}
