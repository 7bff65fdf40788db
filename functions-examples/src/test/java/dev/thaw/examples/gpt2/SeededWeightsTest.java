package dev.thaw.examples.gpt2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.gpt2.kernels.Fp16;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.junit.jupiter.api.Test;

class SeededWeightsTest {

  private static ByteBuffer read(SeededWeights w, Gpt2Tensor t, long offset, int bytes) {
    ByteBuffer b = ByteBuffer.allocate(bytes).order(ByteOrder.LITTLE_ENDIAN);
    w.read(t, offset, b);
    assertEquals(bytes, b.position());
    return b.flip();
  }

  @Test
  void valuesDependOnSeedTensorAndElementOnlyNotOnHowTheyAreRead() {
    Gpt2Config c = Gpt2Config.named("tiny-wide");
    SeededWeights w = new SeededWeights(c, 11);
    Gpt2Tensor fc = Gpt2Tensor.all(c).stream().filter(t -> t.name().equals("h.1.mlp.c_fc.weight")).findFirst()
        .orElseThrow(); // 128 × 512 = 65536 elements: exactly one chunk; wte spans several
    Gpt2Tensor wte = Gpt2Tensor.all(c).get(0);
    for (Gpt2Tensor t : List.of(fc, wte)) {
      ByteBuffer whole = read(w, t, 0, (int) t.halfBytes());
      ByteBuffer parts = ByteBuffer.allocate((int) t.halfBytes());
      long step = 2 * 40_001; // parts straddle chunk boundaries
      for (long at = 0; at < t.halfBytes(); at += step) {
        parts.put(read(w, t, at, (int) Math.min(step, t.halfBytes() - at)));
      }
      assertEquals(whole, parts.flip(), t.name());
      assertEquals(whole, read(new SeededWeights(c, 11), t, 0, (int) t.halfBytes()));
      assertNotEquals(whole, read(new SeededWeights(c, 12), t, 0, (int) t.halfBytes()));
    }
  }

  @Test
  void followsGpt2Init() {
    Gpt2Config c = Gpt2Config.named("tiny-wide");
    SeededWeights w = new SeededWeights(c, 1);
    for (Gpt2Tensor t : Gpt2Tensor.all(c)) {
      ByteBuffer b = read(w, t, 0, (int) t.halfBytes());
      double sum = 0;
      double sq = 0;
      for (int i = 0; i < t.elements(); i++) {
        float f = Fp16.toFloat(b.getShort(2 * i));
        sum += f;
        sq += f * f;
      }
      double mean = sum / t.elements();
      double std = Math.sqrt(sq / t.elements() - mean * mean);
      switch (t.init()) {
        case ONES -> assertEquals(1.0, mean, 0.0, t.name());
        case ZEROS -> assertEquals(0.0, sq, 0.0, t.name());
        case NORMAL -> {
          assertEquals(0.0, mean, 0.002, t.name());
          assertEquals(0.02, std, 0.001, t.name());
        }
        default -> throw new AssertionError();
      }
      assertTrue(t.name().endsWith(".bias") == (t.init() == Gpt2Tensor.Init.ZEROS), t.name());
    }
  }
}
