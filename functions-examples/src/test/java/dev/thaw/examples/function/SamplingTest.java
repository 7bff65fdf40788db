package dev.thaw.examples.function;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.InvalidRequestException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** How a token is picked: greedy, filtered sampling by seed, penalties, bias and log-probabilities. */
class SamplingTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  static Sampling parse(String json) throws Exception {
    return Sampling.parse(JSON.readTree(json), 8);
  }

  static float[] logits() {
    return new float[] {1f, 3f, 2.5f, -1f, 3f, 0f, 0.5f, 2f};
  }

  @Test
  void greedyTakesTheFirstLargestAndTopKOfOneIsGreedyAtAnyTemperature() throws Exception {
    assertEquals(1, Sampling.GREEDY.pick(logits(), Map.of(), 0, 0).id());
    Sampling topOne = parse("{\"temperature\": 1.5, \"topK\": 1, \"seed\": 3}");
    Set<Integer> tied = new HashSet<>();
    for (int step = 0; step < 50; step++) {
      float[] l = logits();
      l[4] = 2.9f;
      assertEquals(1, topOne.pick(l, Map.of(), 0, step).id());
      // As transformers' top-k: a tie with the k-th largest stays in.
      tied.add(topOne.pick(logits(), Map.of(), 0, step).id());
    }
    assertEquals(Set.of(1, 4), tied);
  }

  @Test
  void drawsDependOnTheSeedSequenceAndStepAloneAndStayInsideTopP() throws Exception {
    Sampling s = parse("{\"temperature\": 1.0, \"seed\": 11}");
    int[] a = new int[40];
    int[] b = new int[40];
    for (int step = 0; step < 40; step++) {
      a[step] = s.pick(logits(), Map.of(), 0, step).id();
      b[step] = s.pick(logits(), Map.of(), 0, step).id();
    }
    assertArrayEquals(a, b, "one seed, one draw");
    int[] other = new int[40];
    for (int step = 0; step < 40; step++) {
      other[step] = s.pick(logits(), Map.of(), 1, step).id();
    }
    assertNotEquals(java.util.Arrays.toString(a), java.util.Arrays.toString(other), "another sequence draws apart");
    Set<Integer> seen = new HashSet<>();
    Sampling nucleus = parse("{\"temperature\": 1.0, \"topP\": 0.5, \"seed\": 2}");
    for (int step = 0; step < 200; step++) {
      seen.add(nucleus.pick(logits(), Map.of(), 0, step).id());
    }
    assertEquals(Set.of(1, 4), seen, "the two tokens at 3.0 hold over half the mass");
  }

  @Test
  void penaltiesAndBiasMoveTheLogitsAndLogprobsAreOfThem() throws Exception {
    Sampling s = parse("{\"temperature\": 0, \"frequencyPenalty\": 1.0, \"presencePenalty\": 0.5, "
        + "\"logitBias\": {\"7\": 1.5}, \"logprobs\": 3}");
    Map<Integer, Integer> counts = new HashMap<>(Map.of(1, 1));
    // 1 drops to 1.5 and 4 stays at 3.0; 7 rises to 3.5 and wins.
    Sampling.Pick p = s.pick(logits(), counts, 0, 0);
    assertEquals(7, p.id());
    assertArrayEquals(new int[] {7, 4, 2}, p.topIds());
    assertEquals(p.topLogprobs()[0], p.logprob(), 0);
    double mass = 0;
    float[] l = {1f, 1.5f, 2.5f, -1f, 3f, 0f, 0.5f, 3.5f};
    for (float x : l) {
      mass += Math.exp(x - 3.5);
    }
    assertEquals(-Math.log(mass), p.logprob(), 1e-5);
  }

  @Test
  void refusesFieldsOutOfRange() {
    for (String bad : new String[] {"{\"temperature\": -1}", "{\"topP\": 0}", "{\"topK\": 9}", "{\"seed\": 1.5}",
        "{\"logitBias\": {\"9\": 1}}", "{\"logitBias\": {\"1\": 200}}", "{\"stopTokens\": [8]}", "{\"logprobs\": 21}",
        "{\"presencePenalty\": 3}"}) {
      assertThrows(InvalidRequestException.class, () -> parse(bad), bad);
    }
    assertTrue(Sampling.GREEDY.greedy());
  }
}
