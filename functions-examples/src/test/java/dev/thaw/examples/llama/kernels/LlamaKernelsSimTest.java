package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.examples.gpt2.kernels.Gpt2Cases;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every Java twin on the sim device against a plain fp64 reference: both 16-bit types, the gemv and the
 * tensor-core matmul with every epilogue, GQA, llama3 rotary frequencies, ids outside the vocabulary.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LlamaKernelsSimTest {

  private SimDriver driver;
  private LlamaDevice sim;

  @BeforeAll
  void open() {
    driver = SimDriver.open(new SimOptions());
    sim = new LlamaDevice(driver);
  }

  @AfterEach
  void free() {
    sim.freeBuffers();
  }

  @AfterAll
  void close() {
    sim.close();
    driver.close();
  }

  static Stream<LlamaCases.Case> cases() {
    HalfType bf = HalfType.BF16;
    HalfType fp = HalfType.FP16;
    float[] freq = LlamaConfig.named("tiny").inverseFrequencies();
    return Stream.of(
        LlamaCases.embed(1, bf, 5, 64, 97),
        LlamaCases.embed(2, fp, 3, 40, 11),
        LlamaCases.rmsnorm(3, bf, 3, 256),
        LlamaCases.rmsnorm(4, fp, 2, 96),
        LlamaCases.linear(5, bf, 1, 72, 96, Epilogue.STORE, true),
        LlamaCases.linear(6, fp, 8, 40, 264, Epilogue.STORE, false),
        LlamaCases.linear(7, bf, 3, 64, 128, Epilogue.RESIDUAL, false),
        LlamaCases.linear(8, bf, 2, 101, 64, Epilogue.FLOAT, false),
        LlamaCases.linear(9, bf, 70, 130, 96, Epilogue.STORE, true),
        LlamaCases.linear(10, fp, 9, 64, 64, Epilogue.RESIDUAL, false),
        LlamaCases.linear(11, bf, 33, 97, 64, Epilogue.FLOAT, false),
        LlamaCases.ropeKv(12, bf, 2, 4, 2, 16, 8, freq, new int[] {0, 1, 1}, new int[] {7, 0, 3}),
        LlamaCases.ropeKv(13, fp, 1, 2, 1, 16, 4, LlamaConfig.named("tiny-qwen2").withType(fp).inverseFrequencies(),
            new int[] {0}, new int[] {2}),
        LlamaCases.attention(14, bf, 2, 4, 2, 16, 8, new int[] {0, 1, 1}, new int[] {7, 0, 3}),
        LlamaCases.attention(15, fp, 1, 8, 1, 32, 6, new int[] {0, 0}, new int[] {5, 2}),
        LlamaCases.swiglu(16, bf, 3, 100),
        LlamaCases.argmax(17, 3, 1000));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void simMatchesTheReference(LlamaCases.Case c) {
    assertNull(Gpt2Cases.compare(c.name, "reference", c.reference(), "sim", c.run(sim)));
  }
}
