package dev.thaw.examples.mlp;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Assertions;

/** What the mlp tests share: JSON, inputs, and reading the function's parameters back from the device. */
final class MlpTesting {

  static final ObjectMapper JSON = new ObjectMapper();

  private MlpTesting() {}

  static JsonNode json(String text) {
    try {
      return JSON.readTree(text);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** {@code rows * width} values in [-1, 1), made from {@code seed}. */
  static float[] input(long seed, int rows, int width) {
    Random r = new Random(seed);
    float[] v = new float[rows * width];
    for (int i = 0; i < v.length; i++) {
      v[i] = 2 * r.nextFloat() - 1;
    }
    return v;
  }

  static FunctionRequest request(float[] values, int width) {
    ObjectNode json = JSON.createObjectNode();
    ArrayNode rows = json.putArray("inputs");
    for (int r = 0; r < values.length / width; r++) {
      ArrayNode row = rows.addArray();
      for (int c = 0; c < width; c++) {
        row.add(values[r * width + c]);
      }
    }
    return FunctionRequest.of(json);
  }

  static float[][] outputs(JsonNode response) {
    JsonNode outs = response.get("outputs");
    float[][] v = new float[outs.size()][];
    for (int r = 0; r < v.length; r++) {
      v[r] = new float[outs.get(r).size()];
      for (int c = 0; c < v[r].length; c++) {
        v[r][c] = outs.get(r).get(c).floatValue();
      }
    }
    return v;
  }

  static float[][] weights(FunctionSession session, MlpFunction.State s) {
    float[][] w = new float[s.weights().size()][];
    for (int i = 0; i < w.length; i++) {
      w[i] = floats(session, s.weights().get(i), s.layers().get(i) * s.layers().get(i + 1));
    }
    return w;
  }

  static float[][] biases(FunctionSession session, MlpFunction.State s) {
    float[][] b = new float[s.biases().size()][];
    for (int i = 0; i < b.length; i++) {
      b[i] = floats(session, s.biases().get(i), s.layers().get(i + 1));
    }
    return b;
  }

  static float[] floats(FunctionSession session, BufferRef ref, int count) {
    ByteBuffer bytes = ByteBuffer.allocateDirect(4 * count).order(ByteOrder.LITTLE_ENDIAN);
    session.download(ref, 0, bytes);
    float[] v = new float[count];
    bytes.asFloatBuffer().get(v);
    return v;
  }

  /**
   * Asserts that {@code response} is the reference within its TF32 bound, element by element, and that each
   * argmax is the reference's unless the reference's top two are closer than their bounds (a near-tie, which
   * TF32 may decide either way; such rows are returned, described).
   */
  static List<String> assertMatchesReference(String what, List<Integer> layers, JsonNode response,
      MlpReference.Result ref) {
    float[][] got = outputs(response);
    int outLayer = layers.size() - 2;
    Assertions.assertEquals(ref.outputs().length, got.length, what + ": rows");
    List<String> nearTies = new ArrayList<>();
    for (int r = 0; r < got.length; r++) {
      double[] exp = ref.outputs()[r];
      Assertions.assertEquals(exp.length, got[r].length, what + ": columns of row " + r);
      for (int c = 0; c < exp.length; c++) {
        double diff = Math.abs(got[r][c] - exp[c]);
        if (!(diff <= ref.bounds()[r][c])) {
          Assertions.fail(String.format(
              "%s: layer %d (output) row %d column %d: expected %.9g (fp64 reference), got %.9g; |diff| %.3g > "
                  + "TF32 bound %.3g", what, outLayer, r, c, exp[c], got[r][c], diff, ref.bounds()[r][c]));
        }
      }
      int want = MlpReference.argmax(exp);
      int gotArg = response.get("argmax").get(r).asInt();
      if (gotArg != want) {
        double gap = Math.abs(exp[want] - exp[gotArg]);
        String tie = String.format("%s: row %d argmax %d, reference %d, whose values differ by %.3g", what, r, gotArg,
            want, gap);
        if (!(gap <= ref.bounds()[r][want] + ref.bounds()[r][gotArg])) {
          Assertions.fail(tie + ", more than their bounds " + ref.bounds()[r][want] + " + "
              + ref.bounds()[r][gotArg]);
        }
        nearTies.add(tie);
      }
    }
    return nearTies;
  }
}
