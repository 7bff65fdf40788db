package dev.thaw.examples.gpt2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.InvalidConfigException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class Gpt2ConfigTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void namedConfigsAreTheReleasedSizesAndAllValid() {
    Gpt2Config large = Gpt2Config.named("gpt2-large");
    assertEquals(1280, large.nEmbd());
    assertEquals(36, large.nLayer());
    assertEquals(20, large.nHead());
    assertEquals(64, large.headSize());
    assertEquals(50257, large.vocabSize());
    // 774M parameters, as released (wte counted once).
    assertEquals(774_030_080L, large.parameterCount());
    assertEquals(124_439_808L, Gpt2Config.named("gpt2").parameterCount());
    assertEquals(1600, Gpt2Config.named("gpt2-xl").nEmbd());
    assertEquals(16, Gpt2Config.named("gpt2-medium").nHead());
    for (String n : Gpt2Config.names()) {
      Gpt2Config.named(n).validate();
    }
    assertTrue(assertThrows(InvalidConfigException.class, () -> Gpt2Config.named("gpt3")).getMessage()
        .contains("'gpt3'"));
  }

  @Test
  void aHuggingFaceConfigRoundTrips(@TempDir Path dir) throws Exception {
    Gpt2Config tiny = Gpt2Config.named("tiny");
    Files.writeString(dir.resolve("config.json"), JSON.writeValueAsString(tiny.toHuggingFace()));
    Gpt2Config read = Gpt2Config.fromDirectory(dir);
    assertEquals(new Gpt2Config("hf", 64, 2, 4, 64, 97, 1e-5f), read);
  }

  private static String refusal(String json) throws Exception {
    return assertThrows(InvalidConfigException.class, () -> Gpt2Config.fromHuggingFace(JSON.readTree(json)))
        .getMessage();
  }

  private static ObjectNode base() {
    return Gpt2Config.named("tiny").toHuggingFace();
  }

  @Test
  void refusesWhatTheKernelsCannotRunNamingTheField() throws Exception {
    assertTrue(refusal(base().put("n_head", 3).toString()).contains("n_head 3 does not divide n_embd 64"));
    assertTrue(refusal(base().put("n_embd", 72).put("n_head", 9).toString()).contains("multiple of 16"));
    assertTrue(refusal(base().put("n_embd", 512).put("n_head", 2).toString()).contains("head size"));
    assertTrue(refusal(base().put("n_positions", 2048).toString()).contains("n_positions 2048"));
    assertTrue(refusal(base().put("vocab_size", 0).toString()).contains("vocab_size must be positive"));
    assertTrue(refusal(base().put("n_layer", -1).toString()).contains("n_layer"));
    assertTrue(refusal(base().put("activation_function", "relu").toString()).contains("gelu_new"));
    assertTrue(refusal(base().put("n_inner", 100).toString()).contains("n_inner"));
    assertTrue(refusal(base().put("scale_attn_by_inverse_layer_idx", true).toString())
        .contains("scale_attn_by_inverse_layer_idx"));
    assertTrue(refusal(base().put("model_type", "llama").toString()).contains("llama"));
    assertTrue(refusal(base().put("n_embd", "64").toString()).contains("'n_embd' must be an integer"));
    assertTrue(refusal(base().put("layer_norm_epsilon", -1).toString()).contains("layer_norm_epsilon"));
    ObjectNode noVocab = base();
    noVocab.remove("vocab_size");
    assertTrue(refusal(noVocab.toString()).contains("no 'vocab_size'"));
    assertTrue(refusal("[]").contains("JSON object"));
  }

  @Test
  void nCtxStandsInForAMissingNPositions() throws Exception {
    ObjectNode old = base();
    old.remove("n_positions");
    old.put("n_ctx", 32);
    assertEquals(32, Gpt2Config.fromHuggingFace(old).nPositions());
  }
}
