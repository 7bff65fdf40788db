package dev.thaw.runtime.gpu.contract;

import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.cuda.CudaDriver;

/** The contract on a real GPU; every test is skipped, with the reason, where no GPU is usable. */
class CudaDriverContractTest extends GpuDriverContract {

  @Override
  protected DriverAvailability availability() {
    return CudaDriver.availability();
  }

  @Override
  protected GpuDriver openDriver() {
    return CudaDriver.open();
  }

  @Override
  protected String deviceChoice() {
    return "cuda";
  }
}
