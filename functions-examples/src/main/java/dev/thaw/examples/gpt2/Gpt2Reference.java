package dev.thaw.examples.gpt2;

import dev.thaw.examples.gpt2.kernels.Fp16;
import dev.thaw.examples.transformer.ArgmaxSim;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.Map;

/**
 * GPT-2 on the CPU in plain Java: the reference the device function is checked against.
 *
 * <p>It computes what the kernels compute, in the same precision: fp16 weights, fp32 arithmetic, an fp32
 * residual stream, and activations rounded to fp16 where the kernels store them (layer-norm outputs, qkv,
 * the KV cache, attention outputs, the MLP hidden layer). Sums run in a fixed sequential order. Greedy
 * decoding with a KV cache, one cache per sequence. Meant for small models: every weight is held as fp32.
 */
public final class Gpt2Reference {

  private final Gpt2Config config;
  private final Map<String, float[]> weights;

  private Gpt2Reference(Gpt2Config config, Map<String, float[]> weights) {
    this.config = config;
    this.weights = weights;
  }

  /** Reads every tensor of {@code source} into fp32. */
  public static Gpt2Reference load(Gpt2Weights source) throws IOException {
    Map<String, float[]> w = new HashMap<>();
    for (Gpt2Tensor t : Gpt2Tensor.all(source.config())) {
      if (t.halfBytes() > Integer.MAX_VALUE) {
        throw new IllegalArgumentException(t + " is too large for the CPU reference");
      }
      ByteBuffer b = ByteBuffer.allocate((int) t.halfBytes()).order(ByteOrder.LITTLE_ENDIAN);
      source.read(t, 0, b);
      float[] f = new float[(int) t.elements()];
      for (int i = 0; i < f.length; i++) {
        f[i] = Fp16.toFloat(b.getShort(2 * i));
      }
      w.put(t.name(), f);
    }
    return new Gpt2Reference(source.config(), w);
  }

  public Gpt2Config config() {
    return config;
  }

  /**
   * Greedy generation.
   *
   * @param prompts token ids, one array per sequence (lengths may differ)
   * @param maxNewTokens tokens to generate per sequence; 0 runs the prompt only
   * @return the generated ids and the logits of the last step (the one that chose the last token, or the
   *     prompt's last position when nothing is generated)
   */
  public Result generate(int[][] prompts, int maxNewTokens) {
    int[][] generated = new int[prompts.length][maxNewTokens];
    float[][] lastLogits = new float[prompts.length][];
    for (int b = 0; b < prompts.length; b++) {
      Sequence s = new Sequence(prompts[b].length + maxNewTokens);
      float[] logits = null;
      for (int t = 0; t < prompts[b].length; t++) {
        logits = s.step(prompts[b][t]);
      }
      for (int i = 0; i < maxNewTokens; i++) {
        generated[b][i] = argmax(logits);
        if (i + 1 < maxNewTokens) {
          logits = s.step(generated[b][i]);
        }
      }
      lastLogits[b] = logits;
    }
    return new Result(generated, lastLogits);
  }

  /** What {@link #generate} returns. */
  public record Result(int[][] tokens, float[][] logits) {}

  /** The index of the largest value, the lowest on ties; NaN never wins (-1 if all are NaN), as the kernel. */
  public static int argmax(float[] v) {
    return ArgmaxSim.argmax(v, v.length);
  }

  /** One sequence's KV cache, fed a token at a time (a prompt token by token gives the same as one pass). */
  private final class Sequence {
    private final int c = config.nEmbd();
    private final int h = config.nHead();
    private final int d = config.headSize();
    private final float[][] k;
    private final float[][] v;
    private int position;

    Sequence(int length) {
      k = new float[config.nLayer()][length * c];
      v = new float[config.nLayer()][length * c];
    }

    float[] step(int token) {
      int pos = position++;
      float[] x = new float[c];
      float[] wte = weights.get("wte.weight");
      float[] wpe = weights.get("wpe.weight");
      for (int i = 0; i < c; i++) {
        x[i] = wte[token * c + i] + wpe[pos * c + i];
      }
      float scale = (float) (1.0 / Math.sqrt(d));
      for (int l = 0; l < config.nLayer(); l++) {
        float[] ln = layerNorm(x, w(l, "ln_1.weight"), w(l, "ln_1.bias"));
        float[] qkv = half(matmul(ln, w(l, "attn.c_attn.weight"), w(l, "attn.c_attn.bias"), 3 * c, false));
        System.arraycopy(qkv, c, k[l], pos * c, c);
        System.arraycopy(qkv, 2 * c, v[l], pos * c, c);
        float[] att = new float[c];
        float[] p = new float[pos + 1];
        for (int head = 0; head < h; head++) {
          float mx = Float.NEGATIVE_INFINITY;
          for (int t = 0; t <= pos; t++) {
            float dot = 0f;
            for (int j = 0; j < d; j++) {
              dot += qkv[head * d + j] * k[l][t * c + head * d + j];
            }
            p[t] = scale * dot;
            mx = Math.max(mx, p[t]);
          }
          float sum = 0f;
          for (int t = 0; t <= pos; t++) {
            p[t] = (float) Math.exp(p[t] - mx);
            sum += p[t];
          }
          for (int j = 0; j < d; j++) {
            float o = 0f;
            for (int t = 0; t <= pos; t++) {
              o += p[t] * v[l][t * c + head * d + j];
            }
            att[head * d + j] = o / sum;
          }
        }
        att = half(att);
        residual(x, matmul(att, w(l, "attn.c_proj.weight"), w(l, "attn.c_proj.bias"), c, false));
        ln = layerNorm(x, w(l, "ln_2.weight"), w(l, "ln_2.bias"));
        float[] fc = half(matmul(ln, w(l, "mlp.c_fc.weight"), w(l, "mlp.c_fc.bias"), 4 * c, true));
        residual(x, matmul(fc, w(l, "mlp.c_proj.weight"), w(l, "mlp.c_proj.bias"), c, false));
      }
      float[] ln = layerNorm(x, weights.get("ln_f.weight"), weights.get("ln_f.bias"));
      float[] logits = new float[config.vocabSize()];
      for (int t = 0; t < logits.length; t++) {
        float acc = 0f;
        for (int i = 0; i < c; i++) {
          acc += ln[i] * wte[t * c + i];
        }
        logits[t] = acc;
      }
      return logits;
    }

    private float[] w(int layer, String suffix) {
      return weights.get(Gpt2Tensor.layer(layer, suffix));
    }

    /** fp16 output, as the kernel stores it. */
    private float[] layerNorm(float[] x, float[] gamma, float[] beta) {
      float s = 0f;
      for (float f : x) {
        s += f;
      }
      float mean = s / c;
      float q = 0f;
      for (float f : x) {
        float dv = f - mean;
        q += dv * dv;
      }
      float var = q / c;
      float rstd = (float) (1.0 / Math.sqrt(var + config.layerNormEpsilon()));
      float[] y = new float[c];
      for (int i = 0; i < c; i++) {
        y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
      }
      return half(y);
    }

    /** {@code act(x W + b)} in fp32, W [K, N] row-major, summed over k in order. */
    private float[] matmul(float[] x, float[] w, float[] bias, int n, boolean gelu) {
      int kk = x.length;
      float[] acc = new float[n];
      for (int i = 0; i < kk; i++) {
        float xv = x[i];
        for (int j = 0; j < n; j++) {
          acc[j] += xv * w[i * n + j];
        }
      }
      for (int j = 0; j < n; j++) {
        float y = acc[j] + bias[j];
        acc[j] = gelu ? geluNew(y) : y;
      }
      return acc;
    }

    private void residual(float[] x, float[] delta) {
      for (int i = 0; i < c; i++) {
        x[i] = x[i] + delta[i];
      }
    }
  }

  /** GELU, tanh approximation ({@code gelu_new}). */
  static float geluNew(float x) {
    final float sqrt2OverPi = 0.7978845608028654f;
    float inner = sqrt2OverPi * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + (float) Math.tanh(inner));
  }

  static float[] half(float[] v) {
    float[] out = new float[v.length];
    for (int i = 0; i < v.length; i++) {
      out[i] = Fp16.toFloat(Fp16.fromFloat(v[i]));
    }
    return out;
  }
}
