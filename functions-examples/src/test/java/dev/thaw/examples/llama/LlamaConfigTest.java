package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.runtime.function.InvalidConfigException;
import org.junit.jupiter.api.Test;

/** Hugging Face configs of the three families, as transformers 4 and 5 write them, and what is refused. */
class LlamaConfigTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Llama 3.1 8B's config.json as transformers 5 writes it (rope_parameters, dtype). */
  static ObjectNode llama31v5() throws Exception {
    return (ObjectNode) JSON.readTree("""
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
         "rms_norm_eps": 1e-05, "hidden_act": "silu", "tie_word_embeddings": false, "attention_bias": false,
         "mlp_bias": false, "dtype": "bfloat16",
         "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
           "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
        """);
  }

  @Test
  void readsTheNamedShapesAsTheirHuggingFaceConfigsSayThem() throws Exception {
    LlamaConfig c = LlamaConfig.fromHuggingFace(llama31v5(), null);
    LlamaConfig named = LlamaConfig.named("llama-3.1-8b");
    assertEquals(named, new LlamaConfig("llama-3.1-8b", c.architecture(), c.hiddenSize(), c.layers(), c.heads(),
        c.kvHeads(), c.headDim(), c.intermediateSize(), c.vocabSize(), c.maxPositions(), c.rmsNormEps(),
        c.ropeTheta(), c.ropeScaling(), c.tieEmbeddings(), c.qkvBias(), c.slidingWindow(), c.type()));
    // Every named shape survives toHuggingFace -> fromHuggingFace (the transformers 4 spelling).
    for (String name : LlamaConfig.names()) {
      LlamaConfig n = LlamaConfig.named(name);
      LlamaConfig back = LlamaConfig.fromHuggingFace(n.toHuggingFace(), null);
      assertEquals(n.parameterCount(), back.parameterCount(), name);
      assertEquals(n.ropeScaling(), back.ropeScaling(), name);
      assertEquals(n.qkvBias(), back.qkvBias(), name);
      assertEquals(n.tieEmbeddings(), back.tieEmbeddings(), name);
    }
    // Parameter counts of the released models.
    assertEquals(8.03e9, named.parameterCount(), 0.01e9);
    assertEquals(1.24e9, LlamaConfig.named("llama-3.2-1b").parameterCount(), 0.01e9);
    assertEquals(0.494e9, LlamaConfig.named("qwen2.5-0.5b").parameterCount(), 0.001e9);
    assertEquals(7.62e9, LlamaConfig.named("qwen2.5-7b").parameterCount(), 0.01e9);
    assertEquals(32.76e9, LlamaConfig.named("qwen2.5-32b").parameterCount(), 0.01e9);
    assertEquals(70.55e9, LlamaConfig.named("llama-3.1-70b").parameterCount(), 0.01e9);
    assertEquals(7.25e9, LlamaConfig.named("mistral-7b").parameterCount(), 0.01e9);
    assertEquals(1.10e9, LlamaConfig.named("tinyllama-1.1b").parameterCount(), 0.01e9);
  }

  @Test
  void llama3ScalingDividesLowFrequenciesAndKeepsHighOnes() {
    float[] f = LlamaConfig.named("llama-3.1-8b").inverseFrequencies();
    assertEquals(64, f.length);
    assertEquals(1f, f[0]);  // wavelength 2 pi: far below 8192 / 4, unscaled
    double unscaled = 1 / Math.pow(500000, 126.0 / 128);
    assertEquals(unscaled / 8, f[63], unscaled * 1e-5);  // wavelength above 8192: divided by the factor
    float[] plain = LlamaConfig.named("mistral-7b").inverseFrequencies();
    assertEquals(1 / Math.pow(1e6, 2.0 * 10 / 128), plain[10], 1e-6 * plain[10]);
  }

  @Test
  void qwen2HasBiasesAndAWindowOnlyWhenItUsesOne() throws Exception {
    ObjectNode q = LlamaConfig.named("qwen2.5-0.5b").toHuggingFace();
    q.put("sliding_window", 4096).put("use_sliding_window", false);
    LlamaConfig c = LlamaConfig.fromHuggingFace(q, null);
    assertTrue(c.qkvBias());
    assertEquals(0, c.slidingWindow());
    q.put("use_sliding_window", true);
    LlamaConfig windowed = LlamaConfig.fromHuggingFace(q, null);
    windowed.checkContext(4096);
    InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> windowed.checkContext(4097));
    assertTrue(e.getMessage().contains("sliding_window 4096"), e.getMessage());
  }

  @Test
  void aNullTopLevelThetaTakesTheOneInRopeParameters() throws Exception {
    ObjectNode c = llama31v5();
    c.putNull("rope_theta");
    assertEquals(500000.0, LlamaConfig.fromHuggingFace(c, null).ropeTheta());
  }

  @Test
  void aMissingDtypeIsLeftForTheWeightsToTell() throws Exception {
    ObjectNode c = llama31v5();
    c.remove("dtype");
    assertNull(LlamaConfig.fromHuggingFace(c, null).type());
    c.put("torch_dtype", "float16");
    assertEquals(HalfType.FP16, LlamaConfig.fromHuggingFace(c, null).type());
  }

  @Test
  void refusesWhatTheKernelsDoNotRunNamingTheField() throws Exception {
    String[][] cases = {
        {"rope_parameters", "{\"rope_type\": \"yarn\", \"factor\": 4.0, \"rope_theta\": 10000.0}",
            "rope_parameters.rope_type is 'yarn'"},
        {"rope_parameters", "{\"rope_type\": \"default\", \"rope_theta\": 1e4, \"partial_rotary_factor\": 0.5}",
            "rope_parameters.partial_rotary_factor = 0.5"},
        {"rope_parameters", "{\"full_attention\": {\"rope_theta\": 1e6}, \"sliding_attention\": {}}",
            "rope_parameters.full_attention is not supported"},
        {"partial_rotary_factor", "0.25", "partial_rotary_factor = 0.25"},
        {"num_local_experts", "8", "num_local_experts = 8: mixture-of-experts"},
        {"quantization_config", "{\"quant_method\": \"awq\"}", "quantization_config"},
        {"hidden_act", "\"gelu\"", "hidden_act is 'gelu'"},
        {"attention_bias", "true", "attention_bias = true"},
        {"mlp_bias", "true", "mlp_bias = true"},
        {"dtype", "\"float32\"", "dtype is 'float32'"},
        {"model_type", "\"gpt2\"", "model_type 'gpt2'"},
        {"num_key_value_heads", "5", "num_key_value_heads 5 does not divide"},
        {"hidden_size", "4100", "hidden_size = 4100 is not a multiple of 32"},
        {"head_dim", "12", "head_dim 12"},
        {"vocab_size", "\"big\"", "'vocab_size' must be an integer"},
    };
    for (String[] c : cases) {
      ObjectNode json = llama31v5();
      json.set(c[0], JSON.readTree(c[1]));
      InvalidConfigException e = assertThrows(InvalidConfigException.class,
          () -> LlamaConfig.fromHuggingFace(json, null), c[0]);
      assertTrue(e.getMessage().contains(c[2]), () -> c[0] + " -> " + e.getMessage());
    }
    ObjectNode noLayers = llama31v5();
    noLayers.remove("num_hidden_layers");
    assertTrue(assertThrows(InvalidConfigException.class, () -> LlamaConfig.fromHuggingFace(noLayers, null))
        .getMessage().contains("no 'num_hidden_layers'"));
    ObjectNode mixtral = llama31v5();
    mixtral.put("model_type", "mixtral").putArray("architectures").add("MixtralForCausalLM");
    assertTrue(assertThrows(InvalidConfigException.class, () -> LlamaConfig.fromHuggingFace(mixtral, null))
        .getMessage().contains("'mixtral'"));
  }
}
