package dev.thaw.examples.gpt2.kernels;

import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.transformer.KernelOutput;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The CUDA kernels against their Java twins: every case runs on the CUDA driver and on the sim driver with
 * identical inputs, and the outputs must agree (exactly for embed, kv_append and argmax; fp16 / fp32
 * tolerances otherwise). GPT-2-large shapes included. Skipped, with the reason, where no GPU is usable.
 * A failure names the case, the tensor, the index (row, column), the sim value and the CUDA value.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class Gpt2KernelsGpuTest {

  private CudaAndSim<Gpt2Device> devices;

  @BeforeAll
  void open() {
    devices = CudaAndSim.openIfGpu(Gpt2Device::new);
  }

  @BeforeEach
  void needsAGpu() {
    CudaAndSim.assumeGpu();
  }

  @AfterEach
  void free() {
    devices.freeBuffers();
  }

  @AfterAll
  void close() {
    devices.close();
  }

  static Stream<Gpt2Cases.Case> cases() {
    return Stream.of(
        Gpt2Cases.embed(101, 17, 1280, 300, 1024),
        Gpt2Cases.layernorm(102, 1, 1280),
        Gpt2Cases.layernorm(103, 17, 1280),
        Gpt2Cases.layernorm(104, 3, 80),
        Gpt2Cases.matmul(105, 1, 64, 48, false, false),
        Gpt2Cases.matmul(106, 17, 96, 80, true, false),
        Gpt2Cases.matmul(107, 16, 5120, 1280, false, false),   // GPT-2 large MLP up, decode batch 16
        Gpt2Cases.matmul(108, 16, 5120, 1280, true, false),
        Gpt2Cases.matmul(109, 1, 3840, 1280, false, false),    // GPT-2 large qkv, batch 1
        Gpt2Cases.matmul(110, 100, 768, 128, true, false),      // several row tiles
        Gpt2Cases.matmul(111, 1, 1280, 1280, false, true),     // attention projection into the residual
        Gpt2Cases.matmul(112, 16, 1280, 5120, false, true),    // MLP down into the residual
        Gpt2Cases.matmul(113, 33, 48, 16, false, true),
        Gpt2Cases.kvAppend(114, 3, 20, 64, 1024, new int[] {0, 2, 1, 2}, new int[] {0, 1023, 511, 0}),
        Gpt2Cases.attention(115, 2, 20, 64, 1024, new int[] {0, 1, 1}, new int[] {1023, 0, 300}),
        Gpt2Cases.attention(116, 3, 2, 32, 8, new int[] {2, 0, 1}, new int[] {7, 3, 0}),
        Gpt2Cases.lmHead(117, 1, 50257, 1280),                   // GPT-2 large logits, batch 1
        Gpt2Cases.lmHead(118, 17, 1000, 64),
        Gpt2Cases.argmax(119, 50257),
        Gpt2Cases.argmax(120, 17));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void cudaMatchesSim(Gpt2Cases.Case c) {
    List<KernelOutput> onSim = c.run(devices.sim);
    List<KernelOutput> onCuda = c.run(devices.cuda);
    assertNull(KernelOutput.compare(c.name + " [" + devices.cuda.context.device().name() + "]", "sim", onSim,
        "cuda", onCuda));
  }
}
