package dev.thaw.examples.gpt2;

import static dev.thaw.examples.transformer.ReferenceFiles.JSON;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.transformer.ReferenceFiles;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Gpt2Compare against a reference file in hf_reference.py's format, made here by the CPU reference: the
 * comparator passes a right answer, fails a wrong one, and lets a near-tie through. (No GPU: the sim device.)
 */
class Gpt2CompareTest {

  @TempDir Path dir;

  private ObjectNode reference(int[][] prompts, int newTokens) throws Exception {
    SeededWeights weights = new SeededWeights(Gpt2Config.named("tiny"), 9);
    HfCheckpoint.save(weights, dir.resolve("hf"));
    Gpt2Reference ref = Gpt2Reference.load(weights);
    ObjectNode r = ReferenceFiles.reference(prompts, newTokens, ref.generate(prompts, 0).logits(),
        ref.generate(prompts, newTokens).tokens());
    r.putObject("timing_ms").putObject("forward").put("median", 1.0);
    return r;
  }

  private int compare(JsonNode reference, String name) throws Exception {
    Path file = dir.resolve(name + ".json");
    JSON.writeValue(file.toFile(), reference);
    return Gpt2Compare.run(new String[] {"--dir", dir.resolve("hf").toString(), "--reference", file.toString(),
        "--out", dir.resolve(name + "-summary.json").toString(), "--runs", "2", "--warmup", "1"});
  }

  @Test
  void passesTheRightAnswerFailsAWrongOneAndForgivesANearTie() throws Exception {
    ObjectNode ref = reference(new int[][] {{1, 2, 3, 4, 5, 6}, {60, 50, 40, 30, 20, 10}}, 5);
    assertEquals(0, compare(ref, "right"));
    JsonNode summary = JSON.readTree(dir.resolve("right-summary.json").toFile());
    assertTrue(summary.get("pass").asBoolean());
    assertTrue(summary.get("timing_ms").get("generate_median").asDouble() > 0);

    ReferenceFiles.assertVerdicts(ref, this::compare);
  }
}
