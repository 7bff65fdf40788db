package dev.thaw.examples.function;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.function.InvalidRequestException;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;

/**
 * How a generation request picks each token, beyond greedy: temperature with top-k and top-p (nucleus) filtering,
 * presence and frequency penalties and a logit bias (OpenAI's meanings), the ids that end a sequence, and how many
 * log-probabilities to return. The logits a token is picked from are the model's with the penalties and the bias
 * applied; its log-probabilities are of those logits at temperature 1.
 *
 * <p>Nothing random lives in an image: each draw is a function of the request's {@code seed}, the sequence and the
 * step ({@link #uniform}), so a seed reproduces a completion and two instances restored from one image draw
 * differently only because their requests' seeds differ.
 *
 * @param temperature 0 picks the most likely token (greedy)
 * @param topK keep the k most likely tokens; 0 keeps all
 * @param topP keep the most likely tokens whose probabilities sum to at least p; 1 keeps all
 * @param bias token id → added to its logit
 * @param stopTokens a sequence ends at the first of these (it is its last token)
 * @param logprobs alternatives per token to return (0: the chosen token's log-probability alone); -1 for none
 */
public record Sampling(double temperature, int topK, double topP, long seed, double presencePenalty,
    double frequencyPenalty, Map<Integer, Double> bias, int[] stopTokens, int logprobs) {

  /** The request fields this reads. */
  public static final Set<String> FIELDS = Set.of("temperature", "topK", "topP", "seed", "presencePenalty",
      "frequencyPenalty", "logitBias", "stopTokens", "logprobs");
  public static final int MAX_LOGPROBS = 20;
  public static final Sampling GREEDY = new Sampling(0, 0, 1, 0, 0, 0, Map.of(), new int[0], -1);

  /** True when the device's argmax picks every token: no host work per step. */
  public boolean greedy() {
    return temperature == 0 && presencePenalty == 0 && frequencyPenalty == 0 && bias.isEmpty() && logprobs < 0;
  }

  public boolean stops(int id) {
    for (int s : stopTokens) {
      if (s == id) {
        return true;
      }
    }
    return false;
  }

  /**
   * The sampling fields of {@code json}.
   *
   * @throws InvalidRequestException naming the first field that is wrong
   */
  public static Sampling parse(JsonNode json, int vocab) {
    double temperature = number(json, "temperature", 0, 0, 2);
    int topK = (int) integer(json, "topK", 0, 0, vocab);
    double topP = number(json, "topP", 1, 0, 1);
    if (json.has("topP") && topP == 0) {
      throw new InvalidRequestException("'topP' must be in (0, 1], not 0");
    }
    long seed = integer(json, "seed", 0, Long.MIN_VALUE, Long.MAX_VALUE);
    double presence = number(json, "presencePenalty", 0, -2, 2);
    double frequency = number(json, "frequencyPenalty", 0, -2, 2);
    Map<Integer, Double> bias = new HashMap<>();
    JsonNode b = json.get("logitBias");
    if (b != null && !b.isNull()) {
      if (!b.isObject()) {
        throw new InvalidRequestException("'logitBias' must map token ids to biases, not " + b);
      }
      for (Iterator<Map.Entry<String, JsonNode>> it = b.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        int id;
        try {
          id = Integer.parseInt(e.getKey());
        } catch (NumberFormatException x) {
          throw new InvalidRequestException("'logitBias' key '" + e.getKey() + "' is not a token id");
        }
        if (id < 0 || id >= vocab || !e.getValue().isNumber() || Math.abs(e.getValue().asDouble()) > 100) {
          throw new InvalidRequestException("'logitBias' maps ids in [0, " + vocab + ") to biases in [-100, 100], "
              + "not " + e.getKey() + ": " + e.getValue());
        }
        bias.put(id, e.getValue().asDouble());
      }
    }
    int[] stops = new int[0];
    JsonNode s = json.get("stopTokens");
    if (s != null && !s.isNull()) {
      if (!s.isArray()) {
        throw new InvalidRequestException("'stopTokens' must be a list of token ids, not " + s);
      }
      stops = new int[s.size()];
      for (int i = 0; i < stops.length; i++) {
        JsonNode id = s.get(i);
        if (!id.isIntegralNumber() || id.asLong() < 0 || id.asLong() >= vocab) {
          throw new InvalidRequestException("'stopTokens' holds ids in [0, " + vocab + "), not " + id);
        }
        stops[i] = id.asInt();
      }
    }
    int logprobs = (int) integer(json, "logprobs", -1, -1, MAX_LOGPROBS);
    return new Sampling(temperature, topK, topP, seed, presence, frequency, Map.copyOf(bias), stops, logprobs);
  }

  private static double number(JsonNode json, String field, double fallback, double min, double max) {
    JsonNode v = json.get(field);
    if (v == null || v.isNull()) {
      return fallback;
    }
    if (!v.isNumber() || v.asDouble() < min || v.asDouble() > max || Double.isNaN(v.asDouble())) {
      throw new InvalidRequestException("'" + field + "' must be a number in [" + fmt(min) + ", " + fmt(max)
          + "], not " + v);
    }
    return v.asDouble();
  }

  private static long integer(JsonNode json, String field, long fallback, long min, long max) {
    JsonNode v = json.get(field);
    if (v == null || v.isNull()) {
      return fallback;
    }
    if (!v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < min || v.asLong() > max) {
      throw new InvalidRequestException("'" + field + "' must be an integer in [" + min + ", " + max + "], not "
          + v);
    }
    return v.asLong();
  }

  private static String fmt(double d) {
    return d == Math.rint(d) ? Long.toString((long) d) : Double.toString(d);
  }

  // ---- picking a token ----

  /** One sequence's pick at one step. */
  public record Pick(int id, float logprob, int[] topIds, float[] topLogprobs) {}

  /**
   * Picks sequence {@code seq}'s token at {@code step} from its {@code logits} (changed in place: penalties and
   * bias applied), given the {@code counts} of the tokens it generated so far.
   */
  public Pick pick(float[] logits, Map<Integer, Integer> counts, int seq, int step) {
    for (Map.Entry<Integer, Integer> e : counts.entrySet()) {
      logits[e.getKey()] -= (float) (presencePenalty + frequencyPenalty * e.getValue());
    }
    for (Map.Entry<Integer, Double> e : bias.entrySet()) {
      logits[e.getKey()] += e.getValue().floatValue();
    }
    int id = temperature == 0 ? argmax(logits) : sample(logits, uniform(seed, seq, step));
    if (logprobs < 0) {
      return new Pick(id, Float.NaN, new int[0], new float[0]);
    }
    float max = logits[argmax(logits)];
    double sum = 0;
    for (float l : logits) {
      sum += Math.exp(l - max);
    }
    float lse = (float) (max + Math.log(sum));
    int[] top = topIds(logits, logprobs);
    float[] topLp = new float[top.length];
    for (int i = 0; i < top.length; i++) {
      topLp[i] = logits[top[i]] - lse;
    }
    return new Pick(id, logits[id] - lse, top, topLp);
  }

  /** The index of the largest logit, the lowest on ties; NaN never wins (the device's argmax rule). */
  static int argmax(float[] l) {
    int best = -1;
    for (int i = 0; i < l.length; i++) {
      if (!Float.isNaN(l[i]) && (best < 0 || l[i] > l[best])) {
        best = i;
      }
    }
    return Math.max(best, 0);
  }

  /** The {@code n} largest, largest first (lowest index on ties). */
  static int[] topIds(float[] l, int n) {
    int k = Math.min(n, l.length);
    int[] top = new int[k];
    int filled = 0;
    for (int i = 0; i < l.length; i++) {
      if (Float.isNaN(l[i])) {
        continue;
      }
      int at = filled;
      while (at > 0 && l[i] > l[top[at - 1]]) {
        at--;
      }
      if (at < k) {
        System.arraycopy(top, at, top, at + 1, Math.min(filled, k - 1) - at);
        top[at] = i;
        filled = Math.min(filled + 1, k);
      }
    }
    return Arrays.copyOf(top, filled);
  }

  /** Draws from softmax(logits / T), kept to top-k then top-p, by inverse CDF over the kept ids in id order. */
  private int sample(float[] logits, double u) {
    int v = logits.length;
    float max = logits[argmax(logits)];
    float kth = Float.NEGATIVE_INFINITY;
    if (topK > 0 && topK < v) {
      float[] sorted = logits.clone();
      Arrays.sort(sorted);
      kth = sorted[v - topK];
    }
    double[] p = new double[v];
    double total = 0;
    for (int i = 0; i < v; i++) {
      if (!Float.isNaN(logits[i]) && logits[i] >= kth) {
        p[i] = Math.exp((logits[i] - max) / temperature);
        total += p[i];
      }
    }
    if (topP < 1) {
      Integer[] order = new Integer[v];
      for (int i = 0; i < v; i++) {
        order[i] = i;
      }
      Arrays.sort(order, (a, b) -> Double.compare(p[b], p[a]) != 0 ? Double.compare(p[b], p[a]) : a - b);
      double kept = 0;
      int n = 0;
      while (n < v && (n == 0 || kept < topP * total)) {
        kept += p[order[n]];
        n++;
      }
      for (int i = n; i < v; i++) {
        p[order[i]] = 0;
      }
      total = kept;
    }
    double target = u * total;
    double acc = 0;
    int last = -1;
    for (int i = 0; i < v; i++) {
      if (p[i] > 0) {
        acc += p[i];
        last = i;
        if (acc > target) {
          return i;
        }
      }
    }
    return last < 0 ? argmax(logits) : last;
  }

  /** A uniform draw in [0, 1) that depends on the seed, the sequence and the step alone (SplitMix64). */
  static double uniform(long seed, int seq, int step) {
    long z = seed + 0x9E3779B97F4A7C15L * (1 + ((long) seq << 32 | (step & 0xffffffffL)));
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    z = z ^ (z >>> 31);
    return (z >>> 11) * 0x1.0p-53;
  }
}
