package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDriverProvider;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.util.Map;

/** {@link SimDriver} for {@link GpuDrivers}: always available, set by {@code THAW_SIM_*}. */
public final class SimDriverProvider implements GpuDriverProvider {

  @Override
  public DeviceChoice choice() {
    return DeviceChoice.SIM;
  }

  @Override
  public DriverAvailability availability() {
    return DriverAvailability.yes();
  }

  @Override
  public GpuDriver open(Map<String, String> environment) {
    return SimDriver.open(SimOptions.fromEnvironment(environment));
  }
}
