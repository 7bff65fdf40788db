package dev.thaw.examples.gpt2.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.examples.transformer.KernelOutput;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Each GPT-2 kernel through {@link Gpt2Kernels} on the simulated device (its Java twin) against a plain fp64
 * reference written in {@link Gpt2Cases}: exact for embed, kv_append and argmax; fp16 / fp32 tolerances
 * otherwise. Odd shapes on purpose: M = 1 and 17, V = 50257, positions 0 and maxT - 1.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class Gpt2KernelsSimTest {

  private SimDriver driver;
  private Gpt2Device dev;

  @BeforeAll
  void open() {
    driver = SimDriver.open(new SimOptions());
    dev = new Gpt2Device(driver);
  }

  @AfterEach
  void free() {
    dev.freeBuffers();
  }

  @AfterAll
  void close() {
    if (dev != null) {
      dev.close();
    }
    if (driver != null) {
      driver.close();
    }
  }

  static Stream<Gpt2Cases.Case> cases() {
    return Stream.of(
        Gpt2Cases.embed(1, 1, 48, 97, 40),
        Gpt2Cases.embed(2, 17, 80, 97, 40),
        Gpt2Cases.layernorm(3, 1, 1280),
        Gpt2Cases.layernorm(4, 17, 80),
        Gpt2Cases.matmul(5, 1, 64, 48, false, false),
        Gpt2Cases.matmul(6, 17, 96, 80, true, false),
        Gpt2Cases.matmul(7, 33, 48, 16, false, false),
        Gpt2Cases.matmul(8, 16, 128, 256, true, false),
        Gpt2Cases.matmul(9, 1, 64, 48, false, true),
        Gpt2Cases.matmul(10, 17, 96, 144, false, true),
        Gpt2Cases.kvAppend(11, 3, 2, 64, 20, new int[] {0, 2, 1, 2, 0}, new int[] {0, 19, 7, 0, 19}),
        Gpt2Cases.kvAppend(12, 1, 12, 64, 1024, new int[] {0}, new int[] {1023}),
        Gpt2Cases.attention(13, 2, 3, 64, 40, new int[] {0, 1, 1, 0}, new int[] {0, 39, 17, 5}),
        Gpt2Cases.attention(14, 1, 2, 64, 1024, new int[] {0}, new int[] {1023}),
        Gpt2Cases.attention(15, 3, 2, 32, 8, new int[] {2, 0, 1}, new int[] {7, 3, 0}),
        Gpt2Cases.lmHead(16, 1, 50257, 64),
        Gpt2Cases.lmHead(17, 17, 1000, 32),
        Gpt2Cases.argmax(18, 50257),
        Gpt2Cases.argmax(19, 17));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void matchesTheFp64Reference(Gpt2Cases.Case c) {
    List<KernelOutput> got = c.run(dev);
    List<KernelOutput> expected = c.reference();
    assertNull(KernelOutput.compare(c.name, "reference", expected, "sim", got));
  }

  @Test
  void comparisonNamesTheCaseTheIndexAndBothValues() {
    var expected = List.of(KernelOutput.fp32("logits", new float[] {1, 2, 3, 4}, 2));
    var got = List.of(KernelOutput.fp32("logits", new float[] {1, 2, 3.01f, 4}, 2));
    assertNull(KernelOutput.compare("k", "sim", expected, "cuda", expected));
    String report = KernelOutput.compare("gpt2_lm_head M=2", "sim", expected, "cuda", got);
    assertNotNull(report);
    assertTrue(report.contains("gpt2_lm_head M=2") && report.contains("[2] (row 1, col 0)")
        && report.contains("sim 3.0") && report.contains("cuda 3.01"), report);
    var exact = List.of(KernelOutput.exact("argmax", new int[] {5}, 1));
    assertNotNull(
        KernelOutput.compare("a", "sim", exact, "cuda", List.of(KernelOutput.exact("argmax", new int[] {4}, 1))));
  }

  @Test
  void refusesShapesTheKernelsCannotTake() {
    Gpt2Kernels k = dev.kernels;
    long a = dev.upload(new short[4096]);
    var s = dev.stream;
    assertThrows(IllegalArgumentException.class, () -> k.matmul(s, a, a, a, a, 1, 24, 16, false)); // N % 16
    assertThrows(IllegalArgumentException.class, () -> k.matmul(s, a, a, a, a, 1, 16, 8, false)); // K % 16
    assertThrows(IllegalArgumentException.class, () -> k.matmul(s, a, a, a, a, 0, 16, 16, false)); // M
    assertThrows(IllegalArgumentException.class, () -> k.matmul(s, a + 2, a, a, a, 1, 16, 16, false)); // align
    assertThrows(IllegalArgumentException.class, () -> k.matmulResidual(s, a, a + 8, a, a, 1, 16, 16));
    assertThrows(IllegalArgumentException.class, () -> k.lmHead(s, a, a, a, 1, 100, 40)); // C % 16
    assertThrows(IllegalArgumentException.class, () -> k.lmHead(s, a, 0L, a, 1, 100, 32)); // null
    assertThrows(IllegalArgumentException.class, () -> k.attention(s, a, a, a, a, a, a, 1, 2, 64, 2048, 1f));
    assertThrows(IllegalArgumentException.class, () -> k.attention(s, a, a, a, a, a, a, 1, 2, 60, 64, 1f));
    assertThrows(IllegalArgumentException.class, () -> k.attention(s, a, a, a, a, a, a, 1, 2, 256, 64, 1f));
    assertThrows(IllegalArgumentException.class, () -> k.embed(s, a, a, a, a, a, 1, 0));
    assertThrows(IllegalArgumentException.class, () -> k.layernorm(s, a, a, a, a, 1, 16, Float.NaN));
    assertThrows(IllegalArgumentException.class, () -> k.argmax(s, a, a, 1, 0));
    assertThrows(IllegalArgumentException.class, () -> k.kvAppend(s, a, a, a, a, a, 1, 0, 64, 8));
  }

  @Test
  void matmulTouchesOnlyRowsBelowM() {
    // A 17-row call pads its second row tile to 32 rows; rows 17.. of X and Y must stay untouched. The sim
    // device fails an out-of-range read, so put X's 17 rows at the very end of a mapping.
    int M = 17;
    int N = 32;
    int K = 32;
    long granule = dev.context.granularity();
    var buf = dev.context.allocate(granule);
    try {
      long x = buf.address() + granule - 2L * M * K;
      dev.context.memsetD8(buf.address(), (byte) 0x3C, granule); // halves 0x3C3C ~ 1.06
      long w = dev.upload(new short[K * N]);
      long b = dev.upload(new short[N]);
      long y = dev.upload(new short[(M + 15) * N]);
      dev.kernels.matmul(dev.stream, x, w, b, y, M, N, K, false);
      short[] out = dev.halves(y, (M + 15) * N);
      for (int i = M * N; i < out.length; i++) {
        assertEquals(0, out[i], "Y element " + i + " past row M was written");
      }
    } finally {
      dev.stream.synchronize();
      buf.close();
    }
  }
}
