package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.examples.function.CudaAndSim;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.kernels.LlamaCases.AttentionKernel;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import dev.thaw.examples.transformer.KernelOutput;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The CUDA kernels against their Java twins: every case runs on the CUDA driver and on the sim driver with
 * identical inputs, and the outputs must agree (exactly for embed, the v copy and argmax; 16-bit / fp32
 * tolerances otherwise). Real Llama-3.1-8B, Qwen2.5-0.5B and Mistral shapes included: the 8B's qkv, o, gate|up
 * and down products at decode, a 4096-wide matmul at prompt size, 128-wide heads at 8:1 and 7:1 GQA; the three
 * mma.sync product tiles and (on compute capability 9.0) the three wgmma ones with every epilogue (fused SwiGLU
 * included), flash prefill over ragged prompts and a
 * cached prefix, split-KV decode up to 16k positions. Skipped, with the reason, where no GPU is usable.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LlamaKernelsGpuTest {

  private CudaAndSim<LlamaDevice> devices;

  @BeforeAll
  void open() {
    devices = CudaAndSim.openIfGpu(LlamaDevice::new);
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

  static Stream<LlamaCases.Case> cases() {
    DriverAvailability a = CudaDriver.availability();
    if (!a.available()) {
      // The real cases hold about a gigabyte of inputs: make none where they cannot run. This one is skipped.
      return Stream.of(new LlamaCases.Case("no usable GPU: " + a.unavailabilityCause()) {
        @Override
        List<KernelOutput> run(LlamaDevice dev) {
          throw new IllegalStateException(name);
        }

        @Override
        List<KernelOutput> reference() {
          throw new IllegalStateException(name);
        }
      });
    }
    HalfType bf = HalfType.BF16;
    HalfType fp = HalfType.FP16;
    float[] llama8b = LlamaConfig.named("llama-3.1-8b").inverseFrequencies();
    float[] qwen = LlamaConfig.named("qwen2.5-0.5b").inverseFrequencies();
    return Stream.of(
        LlamaCases.embed(201, bf, 17, 4096, 3000),
        LlamaCases.embed(202, fp, 5, 896, 100),
        LlamaCases.rmsnorm(203, bf, 1, 4096),
        LlamaCases.rmsnorm(204, bf, 17, 896),
        LlamaCases.rmsnorm(205, fp, 3, 3584),
        LlamaCases.linear(206, bf, 1, 6144, 4096, Epilogue.STORE, false),    // 8B qkv, decode
        LlamaCases.linear(207, bf, 1, 4096, 4096, Epilogue.RESIDUAL, false), // 8B o_proj into the residual
        LlamaCases.linear(208, bf, 1, 28672, 4096, Epilogue.STORE, false),   // 8B gate|up
        LlamaCases.linear(209, bf, 1, 4096, 14336, Epilogue.RESIDUAL, false), // 8B down
        LlamaCases.linear(210, bf, 4, 1152, 896, Epilogue.STORE, true),      // Qwen 0.5B qkv with bias, batch 4
        LlamaCases.linear(211, fp, 8, 4864, 896, Epilogue.STORE, false),     // K = 896: a partial last sweep
        LlamaCases.linear(212, bf, 2, 32768, 1024, Epilogue.FLOAT, false),   // an LM head
        LlamaCases.linear(213, bf, 512, 1024, 4096, Epilogue.STORE, false),  // prompt tile product
        LlamaCases.linear(214, bf, 100, 1152, 896, Epilogue.STORE, true),    // partial row tile, bias
        LlamaCases.linear(215, fp, 65, 4096, 1024, Epilogue.RESIDUAL, false),
        LlamaCases.linear(216, bf, 9, 1000, 2048, Epilogue.FLOAT, false),    // partial column tile
        LlamaCases.ropeKv(217, bf, 2, 32, 8, 128, 1024, llama8b, new int[] {0, 1, 1}, new int[] {1023, 0, 511}),
        LlamaCases.ropeKv(218, bf, 1, 14, 2, 64, 512, qwen, new int[] {0, 0}, new int[] {3, 400}),
        LlamaCases.attention(219, bf, 2, 32, 8, 128, 1024, new int[] {0, 1, 1}, new int[] {1023, 0, 300}),
        LlamaCases.attention(220, bf, 1, 14, 2, 64, 4096, new int[] {0, 0}, new int[] {4095, 17}),
        LlamaCases.attention(221, fp, 1, 28, 4, 128, 64, new int[] {0}, new int[] {63}),
        LlamaCases.swiglu(222, bf, 3, 14336),
        LlamaCases.swiglu(223, fp, 2, 4864),
        LlamaCases.argmax(224, 2, 128256),
        LlamaCases.argmax(225, 1, 17),
        // The mma.sync tiles: partial row and column tiles, every epilogue, 8B widths (K = 4096, 14336).
        LlamaCases.gemm(226, bf, GemmTile.LARGE, 700, 1024, 4096, Epilogue.STORE, false),
        LlamaCases.gemm(227, bf, GemmTile.LARGE, 129, 1024, 14336, Epilogue.RESIDUAL, false),
        LlamaCases.gemm(228, bf, GemmTile.LARGE, 300, 2048, 4096, Epilogue.SWIGLU, false),
        LlamaCases.gemm(229, fp, GemmTile.MEDIUM, 100, 1280, 1280, Epilogue.STORE, true),  // GPT-2-large width
        LlamaCases.gemm(230, bf, GemmTile.MEDIUM, 65, 1000, 2048, Epilogue.FLOAT, false),
        LlamaCases.gemm(231, bf, GemmTile.SMALL, 16, 6144, 4096, Epilogue.STORE, false),    // 8B qkv, 16 rows
        LlamaCases.gemm(232, bf, GemmTile.SMALL, 12, 4096, 4096, Epilogue.SWIGLU, false),
        LlamaCases.gemm(233, fp, GemmTile.SMALL, 9, 1152, 896, Epilogue.STORE, true),       // Qwen 0.5B qkv
        // The wgmma tiles (H100/H200 only; skipped elsewhere): partial row and column tiles, a K of 2080 (a half
        // step at the end), every epilogue, 8B widths, and prompts of two raster groups (17 and 18 row tiles).
        LlamaCases.gemm(240, bf, GemmTile.WGMMA_LARGE, 700, 1024, 4096, Epilogue.STORE, false),
        LlamaCases.gemm(241, bf, GemmTile.WGMMA_LARGE, 129, 1000, 14336, Epilogue.RESIDUAL, false),
        LlamaCases.gemm(242, bf, GemmTile.WGMMA_LARGE, 300, 2048, 4096, Epilogue.SWIGLU, false),
        LlamaCases.gemm(243, bf, GemmTile.WGMMA_LARGE, 2100, 512, 256, Epilogue.STORE, true),
        LlamaCases.gemm(244, fp, GemmTile.WGMMA_MEDIUM, 100, 1280, 1280, Epilogue.STORE, true),  // GPT-2-large
        LlamaCases.gemm(245, bf, GemmTile.WGMMA_MEDIUM, 65, 1000, 2080, Epilogue.FLOAT, false),
        LlamaCases.gemm(246, bf, GemmTile.WGMMA_MEDIUM, 257, 2048, 4096, Epilogue.SWIGLU, false),
        LlamaCases.gemm(247, bf, GemmTile.WGMMA_SMALL, 16, 6144, 4096, Epilogue.STORE, false),   // 8B qkv, 16 rows
        LlamaCases.gemm(248, bf, GemmTile.WGMMA_SMALL, 40, 4096, 896, Epilogue.SWIGLU, false),
        LlamaCases.gemm(249, fp, GemmTile.WGMMA_SMALL, 9, 1152, 896, Epilogue.STORE, true),      // Qwen 0.5B qkv
        LlamaCases.gemm(250, bf, GemmTile.WGMMA_SMALL, 1100, 384, 128, Epilogue.RESIDUAL, false),
        // Flash prefill: 8B heads (8:1 GQA, D 128), a tile spanning two prompts, a cached prefix; Qwen's D 64.
        attention(234, bf, 32, 8, 128, 1024, new int[] {300, 200}, new int[] {0, 0}, AttentionKernel.FLASH),
        attention(235, bf, 32, 8, 128, 4096, new int[] {64, 1}, new int[] {2000, 4095}, AttentionKernel.FLASH),
        attention(236, fp, 14, 2, 64, 256, new int[] {130}, new int[] {0}, AttentionKernel.FLASH),
        // The same on 128-row blocks: three tiles over two prompts, a one-row tile after a cached prefix.
        attention(251, bf, 32, 8, 128, 1024, new int[] {300, 200}, new int[] {0, 0}, AttentionKernel.FLASH_WIDE),
        attention(252, bf, 32, 8, 128, 4096, new int[] {128, 1}, new int[] {2000, 4095}, AttentionKernel.FLASH_WIDE),
        attention(253, fp, 14, 2, 64, 256, new int[] {130}, new int[] {0}, AttentionKernel.FLASH_WIDE),
        // Split-KV decode: 8B heads at 4k and 16k context, Qwen-7B's 7:1 groups (two head slices).
        LlamaCases.attention(237, bf, 2, 32, 8, 128, 4096, new int[] {0, 1, 1}, new int[] {4095, 0, 2999},
            AttentionKernel.DECODE, 0),
        LlamaCases.attention(238, bf, 1, 32, 8, 128, 16384, new int[] {0}, new int[] {16383},
            AttentionKernel.DECODE, 0),
        LlamaCases.attention(239, fp, 1, 28, 4, 128, 2048, new int[] {0}, new int[] {1999},
            AttentionKernel.DECODE, 0));
  }

  private static LlamaCases.Case attention(long seed, HalfType type, int Hq, int Hkv, int D, int maxT,
      int[] lengths, int[] starts, AttentionKernel kernel) {
    int[][] rp = LlamaCases.prompts(lengths, starts);
    return LlamaCases.attention(seed, type, lengths.length, Hq, Hkv, D, maxT, rp[0], rp[1], kernel, 0);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("cases")
  void cudaMatchesSim(LlamaCases.Case c) {
    LlamaDevice cuda = devices.cuda;
    Assumptions.assumeTrue(!c.wgmma() || cuda.kernels(HalfType.BF16).wgmma(),
        () -> c.name + ": wgmma runs on compute capability 9.0 only; this GPU is " + cuda.context.device().smArch());
    assertNull(KernelOutput.compare(c.name + " [" + cuda.context.device().name() + "]", "sim", c.run(devices.sim),
        "cuda", c.run(cuda)));
  }
}
