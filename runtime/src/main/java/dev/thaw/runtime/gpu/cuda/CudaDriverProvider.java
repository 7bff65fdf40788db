package dev.thaw.runtime.gpu.cuda;

import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDriverProvider;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.util.Map;

/** {@link CudaDriver} for {@link GpuDrivers}; it has no settings. */
public final class CudaDriverProvider implements GpuDriverProvider {

  @Override
  public DeviceChoice choice() {
    return DeviceChoice.CUDA;
  }

  @Override
  public DriverAvailability availability() {
    return CudaDriver.availability();
  }

  @Override
  public GpuDriver open(Map<String, String> environment) {
    return CudaDriver.open();
  }
}
