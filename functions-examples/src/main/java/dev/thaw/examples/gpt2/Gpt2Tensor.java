package dev.thaw.examples.gpt2;

import dev.thaw.examples.transformer.WeightTensor;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * One weight tensor of a GPT-2 model: its Hugging Face name (without the {@code transformer.} prefix), its
 * shape, and how GPT-2 initializes it. The device buffer holding it has the same name.
 *
 * @param index the tensor's place in {@link #all}: also what seeds its random values
 */
public record Gpt2Tensor(int index, String name, long[] shape, Init init) implements WeightTensor {

  /** How a tensor starts in a freshly initialized GPT-2. */
  public enum Init {
    /** normal(0, 0.02) */
    NORMAL,
    /** zeros: biases and layer-norm betas */
    ZEROS,
    /** ones: layer-norm gammas */
    ONES
  }

  public static final String PREFIX = "transformer.";

  /** Bytes in fp16. */
  public long halfBytes() {
    return 2 * elements();
  }

  /** Every tensor of a model of {@code config}, in the order the function uploads them. */
  public static List<Gpt2Tensor> all(Gpt2Config config) {
    long c = config.nEmbd();
    List<Gpt2Tensor> out = new ArrayList<>(4 + 12 * config.nLayer());
    add(out, "wte.weight", Init.NORMAL, config.vocabSize(), c);
    add(out, "wpe.weight", Init.NORMAL, config.nPositions(), c);
    for (int i = 0; i < config.nLayer(); i++) {
      String h = "h." + i + ".";
      add(out, h + "ln_1.weight", Init.ONES, c);
      add(out, h + "ln_1.bias", Init.ZEROS, c);
      add(out, h + "attn.c_attn.weight", Init.NORMAL, c, 3 * c);
      add(out, h + "attn.c_attn.bias", Init.ZEROS, 3 * c);
      add(out, h + "attn.c_proj.weight", Init.NORMAL, c, c);
      add(out, h + "attn.c_proj.bias", Init.ZEROS, c);
      add(out, h + "ln_2.weight", Init.ONES, c);
      add(out, h + "ln_2.bias", Init.ZEROS, c);
      add(out, h + "mlp.c_fc.weight", Init.NORMAL, c, 4 * c);
      add(out, h + "mlp.c_fc.bias", Init.ZEROS, 4 * c);
      add(out, h + "mlp.c_proj.weight", Init.NORMAL, 4 * c, c);
      add(out, h + "mlp.c_proj.bias", Init.ZEROS, c);
    }
    add(out, "ln_f.weight", Init.ONES, c);
    add(out, "ln_f.bias", Init.ZEROS, c);
    return List.copyOf(out);
  }

  private static void add(List<Gpt2Tensor> out, String name, Init init, long... shape) {
    out.add(new Gpt2Tensor(out.size(), name, shape, init));
  }

  /** Names of the tensors of block {@code layer}, e.g. {@code layer(3, "attn.c_attn.weight")}. */
  public static String layer(int layer, String suffix) {
    return "h." + layer + "." + suffix;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Gpt2Tensor t && t.index == index && t.name.equals(name) && Arrays.equals(t.shape, shape)
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
