package dev.thaw.examples.gpt2.kernels;

import dev.thaw.examples.function.KernelTestDevice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.function.Function;

/** One context on one driver with the GPT-2 kernels loaded, and upload/download of plain arrays. */
final class Gpt2Device extends KernelTestDevice {

  final Gpt2Kernels kernels;

  Gpt2Device(GpuDriver driver) {
    this(driver, Gpt2Kernels::load);
  }

  /** With kernels of the caller's making, e.g. from an instrumented module. */
  Gpt2Device(GpuDriver driver, Function<GpuContext, Gpt2Kernels> kernels) {
    super(driver);
    this.kernels = kernels.apply(context);
  }

  @Override
  protected void closeKernels() {
    kernels.close();
  }
}
