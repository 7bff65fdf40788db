package dev.thaw.examples.llama;

import dev.thaw.examples.transformer.WeightTensor;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One weight tensor of a Llama-family checkpoint, by its Hugging Face name ({@code model.layers.3.mlp.up_proj.weight}),
 * with its shape and how seeded weights fill it.
 *
 * @param index the tensor's place in {@link #all}: also what seeds its random values
 */
public record LlamaTensor(int index, String name, long[] shape, Init init) implements WeightTensor {

  /** How seeded weights fill a tensor. */
  public enum Init {
    /** normal(0, 0.02): matrices, embeddings and (so that they matter in tests) biases */
    NORMAL,
    /** ones: the RMSNorm weights */
    ONES
  }

  /** Bytes in a 16-bit type. */
  public long bytes() {
    return 2 * elements();
  }

  /** Every tensor of a checkpoint of {@code config} (no {@code lm_head.weight} when tied), in upload order. */
  public static List<LlamaTensor> all(LlamaConfig config) {
    long c = config.hiddenSize();
    long q = config.attentionWidth();
    long kv = (long) config.kvHeads() * config.headDim();
    long inter = config.intermediateSize();
    List<LlamaTensor> out = new ArrayList<>(3 + 12 * config.layers());
    add(out, "model.embed_tokens.weight", Init.NORMAL, config.vocabSize(), c);
    for (int i = 0; i < config.layers(); i++) {
      add(out, layer(i, "input_layernorm.weight"), Init.ONES, c);
      add(out, layer(i, "self_attn.q_proj.weight"), Init.NORMAL, q, c);
      add(out, layer(i, "self_attn.k_proj.weight"), Init.NORMAL, kv, c);
      add(out, layer(i, "self_attn.v_proj.weight"), Init.NORMAL, kv, c);
      if (config.qkvBias()) {
        add(out, layer(i, "self_attn.q_proj.bias"), Init.NORMAL, q);
        add(out, layer(i, "self_attn.k_proj.bias"), Init.NORMAL, kv);
        add(out, layer(i, "self_attn.v_proj.bias"), Init.NORMAL, kv);
      }
      add(out, layer(i, "self_attn.o_proj.weight"), Init.NORMAL, c, q);
      add(out, layer(i, "post_attention_layernorm.weight"), Init.ONES, c);
      add(out, layer(i, "mlp.gate_proj.weight"), Init.NORMAL, inter, c);
      add(out, layer(i, "mlp.up_proj.weight"), Init.NORMAL, inter, c);
      add(out, layer(i, "mlp.down_proj.weight"), Init.NORMAL, c, inter);
    }
    add(out, "model.norm.weight", Init.ONES, c);
    if (!config.tieEmbeddings()) {
      add(out, "lm_head.weight", Init.NORMAL, config.vocabSize(), c);
    }
    return List.copyOf(out);
  }

  private static void add(List<LlamaTensor> out, String name, Init init, long... shape) {
    out.add(new LlamaTensor(out.size(), name, shape, init));
  }

  /** The name of a tensor of decoder layer {@code i}, e.g. {@code layer(3, "mlp.up_proj.weight")}. */
  public static String layer(int i, String suffix) {
    return "model.layers." + i + "." + suffix;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof LlamaTensor t && t.index == index && t.name.equals(name) && Arrays.equals(t.shape, shape)
        && t.init == init;
  }

  @Override
  public int hashCode() {
    return WeightTensor.hash(this);
  }

  @Override
  public String toString() {
    return name + shapeString();
  }
}
