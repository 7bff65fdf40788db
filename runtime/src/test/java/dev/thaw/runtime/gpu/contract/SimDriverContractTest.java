package dev.thaw.runtime.gpu.contract;

import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;

/** The contract on the simulated device, with two devices that are peers: runs everywhere, CI included. */
class SimDriverContractTest extends GpuDriverContract {

  @Override
  protected DriverAvailability availability() {
    return DriverAvailability.yes();
  }

  @Override
  protected GpuDriver openDriver() {
    return SimDriver.open(new SimOptions().setDeviceCount(2));
  }

  @Override
  protected String deviceChoice() {
    return "sim";
  }
}
