package dev.thaw.runtime.gpu;

import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Picks the driver: CUDA when a GPU is usable, else the simulated device, saying why in the log.
 * {@code THAW_DEVICE=cuda|sim} forces one; forcing {@code cuda} without a usable GPU fails with the reason.
 */
public final class GpuDrivers {

  private static final Logger LOG = LoggerFactory.getLogger(GpuDrivers.class);

  private GpuDrivers() {}

  /**
   * Starts the costly part of opening {@code choice} (CUDA's probe: loading {@code libcuda} and {@code cuInit}, a
   * quarter second on a GPU host) on a daemon thread now, so that a later {@link #open} finds it done: for a process
   * that will open a driver and has other work to do first. Nothing for {@link DeviceChoice#SIM}.
   */
  public static void openAhead(DeviceChoice choice) {
    if (choice == DeviceChoice.SIM) {
      return;
    }
    Thread probe = new Thread(CudaDriver::availability, "thaw-cuda-init");
    probe.setDaemon(true);
    probe.start();
  }

  /** Opens the driver {@code THAW_DEVICE} asks for, or picks one. */
  public static GpuDriver open() {
    return open(DeviceChoice.fromEnvironment(), SimOptions.fromEnvironment());
  }

  /**
   * Opens the chosen driver.
   *
   * @throws GpuUnavailableException if {@code choice} is {@link DeviceChoice#CUDA} and no GPU is usable
   */
  public static GpuDriver open(DeviceChoice choice, SimOptions simOptions) {
    switch (choice) {
      case SIM:
        LOG.info("Using the simulated device ({}=sim); its timings are not GPU timings", DeviceChoice.ENV);
        return SimDriver.open(simOptions);
      case CUDA: {
        DriverAvailability cuda = CudaDriver.availability();
        if (!cuda.available()) {
          throw new GpuUnavailableException(DeviceChoice.ENV + "=cuda but no GPU is usable: "
              + cuda.unavailabilityCause());
        }
        return CudaDriver.open();
      }
      default: {
        DriverAvailability cuda = CudaDriver.availability();
        if (cuda.available()) {
          return CudaDriver.open();
        }
        LOG.info("No usable GPU ({}); using the simulated device, whose timings are not GPU timings",
            cuda.unavailabilityCause());
        return SimDriver.open(simOptions);
      }
    }
  }
}
