package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.kernels.LlamaCases.AttentionKernel;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.examples.transformer.KernelOutput;
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
 * Every Java twin on the sim device against a plain fp64 reference: both 16-bit types, the gemv, the WMMA matmul,
 * the three mma.sync tiles and the three wgmma ones with every epilogue (fused SwiGLU included), partial tiles,
 * GQA, flash attention on 64- and 128-row blocks over ragged prompts (a tile spanning two sequences, a cached
 * prefix), split-KV decode with empty and uneven ranges, llama3 rotary frequencies, ids outside the vocabulary.
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
        LlamaCases.argmax(17, 3, 1000),
        LlamaCases.gemm(18, bf, GemmTile.LARGE, 130, 136, 64, Epilogue.STORE, true),
        LlamaCases.gemm(19, fp, GemmTile.MEDIUM, 70, 130, 96, Epilogue.RESIDUAL, false),
        LlamaCases.gemm(20, bf, GemmTile.SMALL, 9, 101, 32, Epilogue.FLOAT, false),
        LlamaCases.gemm(21, bf, GemmTile.LARGE, 65, 200, 64, Epilogue.SWIGLU, false),
        LlamaCases.gemm(22, fp, GemmTile.SMALL, 33, 84, 64, Epilogue.SWIGLU, false),
        // The wgmma tiles (the sim device is compute capability 9.0: the sm_90a module): partial row, column and
        // K steps (K = 96 and 32 are one and a half and half a 64-wide step), every epilogue, two raster groups.
        LlamaCases.gemm(27, bf, GemmTile.WGMMA_LARGE, 130, 600, 96, Epilogue.STORE, true),
        LlamaCases.gemm(28, fp, GemmTile.WGMMA_MEDIUM, 70, 130, 64, Epilogue.RESIDUAL, false),
        LlamaCases.gemm(29, bf, GemmTile.WGMMA_SMALL, 9, 101, 32, Epilogue.FLOAT, false),
        LlamaCases.gemm(30, bf, GemmTile.WGMMA_LARGE, 65, 600, 64, Epilogue.SWIGLU, false),
        LlamaCases.gemm(31, bf, GemmTile.WGMMA_SMALL, 1100, 260, 32, Epilogue.SWIGLU, false),
        attention(23, bf, 4, 2, 64, 192, new int[] {70, 30}, new int[] {0, 100}, AttentionKernel.FLASH, 0),
        attention(24, fp, 8, 8, 128, 80, new int[] {1, 17}, new int[] {40, 0}, AttentionKernel.FLASH, 0),
        attention(32, bf, 4, 2, 64, 400, new int[] {150, 30}, new int[] {0, 100}, AttentionKernel.FLASH_WIDE, 0),
        attention(33, fp, 8, 8, 128, 80, new int[] {1, 17}, new int[] {40, 0}, AttentionKernel.FLASH_WIDE, 0),
        LlamaCases.attention(25, bf, 3, 8, 2, 16, 300, new int[] {0, 1, 2}, new int[] {299, 0, 40},
            AttentionKernel.DECODE, 5),
        LlamaCases.attention(26, fp, 2, 12, 1, 32, 600, new int[] {1, 0}, new int[] {599, 260},
            AttentionKernel.DECODE, 2));
  }

  /** Sequences of {@code lengths[i]} consecutive rows from {@code starts[i]}, sequence i in cache row i. */
  private static LlamaCases.Case attention(long seed, HalfType type, int Hq, int Hkv, int D, int maxT, int[] lengths,
      int[] starts, AttentionKernel kernel, int splits) {
    int[][] rp = LlamaCases.prompts(lengths, starts);
    return LlamaCases.attention(seed, type, lengths.length, Hq, Hkv, D, maxT, rp[0], rp[1], kernel, splits);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void simMatchesTheReference(LlamaCases.Case c) {
    assertNull(KernelOutput.compare(c.name, "reference", c.reference(), "sim", c.run(sim)));
  }
}
