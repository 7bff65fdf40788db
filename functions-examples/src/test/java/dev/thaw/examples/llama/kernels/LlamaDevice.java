package dev.thaw.examples.llama.kernels;

import dev.thaw.examples.function.KernelTestDevice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.function.BiFunction;

/** One context on one driver with the Llama kernels loaded for both 16-bit types, and array upload/download. */
final class LlamaDevice extends KernelTestDevice {

  private final LlamaKernels bf16;
  private final LlamaKernels fp16;

  LlamaDevice(GpuDriver driver) {
    this(driver, LlamaKernels::load);
  }

  /** With kernels of the caller's making, e.g. from an instrumented module. */
  LlamaDevice(GpuDriver driver, BiFunction<GpuContext, HalfType, LlamaKernels> kernels) {
    super(driver);
    this.bf16 = kernels.apply(context, HalfType.BF16);
    this.fp16 = new LlamaKernels(bf16.module(), HalfType.FP16);
  }

  LlamaKernels kernels(HalfType type) {
    return type == HalfType.BF16 ? bf16 : fp16;
  }

  @Override
  protected void closeKernels() {
    bf16.close(); // fp16 shares bf16's module
  }
}
