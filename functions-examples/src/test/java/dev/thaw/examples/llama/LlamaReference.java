package dev.thaw.examples.llama;

import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.transformer.ArgmaxSim;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.Map;

/**
 * A plain CPU Llama-family forward pass, one token at a time with a per-sequence KV cache, written from the
 * Hugging Face modelling code (not from the kernels): RMSNorm, q/k/v with optional biases, rotate_half RoPE,
 * grouped-query attention, SwiGLU, tied or untied head, greedy argmax. fp32 sums; activations rounded to the
 * model's 16-bit type where the function stores them, so tiny models agree with it to fp32 noise.
 */
final class LlamaReference {

  record Result(int[][] tokens, float[][] logits) {}

  /** Per sequence and step, the logits the reference gives after the prompt and the tokens before that step. */
  record Path(float[][][] steps) {}

  private final LlamaConfig c;
  private final HalfType type;
  private final Map<String, float[]> w = new HashMap<>();
  private final float[] invFreq;

  private LlamaReference(LlamaConfig c) {
    this.c = c;
    this.type = c.type();
    this.invFreq = c.inverseFrequencies();
  }

  static LlamaReference load(LlamaWeights weights) throws IOException {
    LlamaReference r = new LlamaReference(weights.config());
    for (LlamaTensor t : LlamaTensor.all(weights.config())) {
      ByteBuffer b = ByteBuffer.allocate((int) t.bytes()).order(ByteOrder.LITTLE_ENDIAN);
      weights.read(t, 0, b);
      float[] f = new float[(int) t.elements()];
      for (int i = 0; i < f.length; i++) {
        f[i] = r.type.toFloat(b.getShort(2 * i));
      }
      r.w.put(t.name(), f);
    }
    return r;
  }

  private float[] w(String name) {
    return w.get(name);
  }

  private float[] lw(int i, String suffix) {
    return w.get(LlamaTensor.layer(i, suffix));
  }

  private float round(float v) {
    return type.toFloat(type.fromFloat(v));
  }

  Result generate(int[][] prompts, int maxNew) {
    int[][] out = new int[prompts.length][maxNew];
    float[][] lastLogits = new float[prompts.length][];
    for (int b = 0; b < prompts.length; b++) {
      int total = prompts[b].length + maxNew;
      float[][][] kc = new float[c.layers()][total][];
      float[][][] vc = new float[c.layers()][total][];
      float[] logits = prompt(prompts[b], kc, vc);
      int pos = prompts[b].length;
      for (int s = 0; s < maxNew; s++) {
        int next = ArgmaxSim.argmax(logits, logits.length);
        out[b][s] = next;
        if (s < maxNew - 1) {
          logits = step(next, pos++, kc, vc);
        }
      }
      lastLogits[b] = logits;
    }
    return new Result(out, lastLogits);
  }

  /**
   * The reference along given tokens instead of its own choices (teacher forcing): step s of sequence b sees the
   * prompt and {@code tokens[b][0..s)}, so a pipeline's choices can be judged where they part from the
   * reference's at a near tie, and its last logits compared in the same context.
   */
  Path follow(int[][] prompts, int[][] tokens) {
    float[][][] steps = new float[prompts.length][][];
    for (int b = 0; b < prompts.length; b++) {
      int total = prompts[b].length + tokens[b].length;
      float[][][] kc = new float[c.layers()][total][];
      float[][][] vc = new float[c.layers()][total][];
      int pos = prompts[b].length;
      steps[b] = new float[Math.max(1, tokens[b].length)][];
      steps[b][0] = prompt(prompts[b], kc, vc);
      for (int s = 1; s < tokens[b].length; s++) {
        steps[b][s] = step(tokens[b][s - 1], pos++, kc, vc);
      }
    }
    return new Path(steps);
  }

  /** The prompt through the model token by token from position 0 into the caches: the last position's logits. */
  private float[] prompt(int[] ids, float[][][] kc, float[][][] vc) {
    float[] logits = null;
    for (int pos = 0; pos < ids.length; pos++) {
      logits = step(ids[pos], pos, kc, vc);
    }
    return logits;
  }

  private float[] rmsnorm(float[] x, float[] weight) {
    float s = 0f;
    for (float v : x) {
      s += v * v;
    }
    float r = (float) (1.0 / Math.sqrt(s / x.length + c.rmsNormEps()));
    float[] y = new float[x.length];
    for (int i = 0; i < x.length; i++) {
      y[i] = round(x[i] * r * weight[i]);
    }
    return y;
  }

  /** y = x W^T (+ bias) with W [n, k] at row offset {@code row0}: fp32 sums in k order. */
  private static float[] linear(float[] x, float[] weight, int row0, int n, float[] bias, int bias0) {
    int k = x.length;
    float[] y = new float[n];
    for (int j = 0; j < n; j++) {
      float s = 0f;
      int base = (row0 + j) * k;
      for (int i = 0; i < k; i++) {
        s += x[i] * weight[base + i];
      }
      y[j] = bias == null ? s : s + bias[bias0 + j];
    }
    return y;
  }

  private float[] step(int token, int pos, float[][][] kc, float[][][] vc) {
    int C = c.hiddenSize();
    int D = c.headDim();
    int hq = c.heads();
    int hkv = c.kvHeads();
    int hd = D / 2;
    float[] x = new float[C];
    System.arraycopy(w("model.embed_tokens.weight"), token * C, x, 0, C);
    for (int i = 0; i < c.layers(); i++) {
      float[] h = rmsnorm(x, lw(i, "input_layernorm.weight"));
      float[] q = linear(h, lw(i, "self_attn.q_proj.weight"), 0, hq * D, c.qkvBias() ? lw(i, "self_attn.q_proj.bias")
          : null, 0);
      float[] k = linear(h, lw(i, "self_attn.k_proj.weight"), 0, hkv * D, c.qkvBias()
          ? lw(i, "self_attn.k_proj.bias") : null, 0);
      float[] v = linear(h, lw(i, "self_attn.v_proj.weight"), 0, hkv * D, c.qkvBias()
          ? lw(i, "self_attn.v_proj.bias") : null, 0);
      for (float[] a : new float[][] {q, k, v}) {
        for (int j = 0; j < a.length; j++) {
          a[j] = round(a[j]);
        }
      }
      for (float[] a : new float[][] {q, k}) {
        for (int head = 0; head < a.length / D; head++) {
          for (int d = 0; d < hd; d++) {
            float angle = (float) pos * invFreq[d];
            float cos = (float) Math.cos(angle);
            float sin = (float) Math.sin(angle);
            float x1 = a[head * D + d];
            float x2 = a[head * D + d + hd];
            a[head * D + d] = round(x1 * cos - x2 * sin);
            a[head * D + d + hd] = round(x2 * cos + x1 * sin);
          }
        }
      }
      kc[i][pos] = k;
      vc[i][pos] = v;
      float[] attn = new float[hq * D];
      float scale = (float) (1.0 / Math.sqrt(D));
      for (int head = 0; head < hq; head++) {
        int kvh = head / (hq / hkv);
        float[] p = new float[pos + 1];
        float mx = Float.NEGATIVE_INFINITY;
        for (int t = 0; t <= pos; t++) {
          float dot = 0f;
          for (int d = 0; d < D; d++) {
            dot += q[head * D + d] * kc[i][t][kvh * D + d];
          }
          p[t] = scale * dot;
          mx = Math.max(mx, p[t]);
        }
        float sum = 0f;
        for (int t = 0; t <= pos; t++) {
          p[t] = (float) Math.exp(p[t] - mx);
          sum += p[t];
        }
        for (int d = 0; d < D; d++) {
          float o = 0f;
          for (int t = 0; t <= pos; t++) {
            o += p[t] * vc[i][t][kvh * D + d];
          }
          attn[head * D + d] = round(o / sum);
        }
      }
      float[] o = linear(attn, lw(i, "self_attn.o_proj.weight"), 0, C, null, 0);
      for (int j = 0; j < C; j++) {
        x[j] = x[j] + o[j];
      }
      h = rmsnorm(x, lw(i, "post_attention_layernorm.weight"));
      int inter = c.intermediateSize();
      float[] g = linear(h, lw(i, "mlp.gate_proj.weight"), 0, inter, null, 0);
      float[] u = linear(h, lw(i, "mlp.up_proj.weight"), 0, inter, null, 0);
      float[] a = new float[inter];
      for (int j = 0; j < inter; j++) {
        float gj = round(g[j]);
        a[j] = round(gj / (1f + (float) Math.exp(-gj)) * round(u[j]));
      }
      float[] down = linear(a, lw(i, "mlp.down_proj.weight"), 0, C, null, 0);
      for (int j = 0; j < C; j++) {
        x[j] = x[j] + down[j];
      }
    }
    float[] h = rmsnorm(x, w("model.norm.weight"));
    float[] head = c.tieEmbeddings() ? w("model.embed_tokens.weight") : w("lm_head.weight");
    return linear(h, head, 0, c.vocabSize(), null, 0);
  }
}
