package dev.thaw.runtime.gpu;

import java.util.Map;
import java.util.ServiceLoader;

/**
 * A driver {@link GpuDrivers} can open, found through {@link ServiceLoader} (each implementation is listed
 * in {@code META-INF/services/dev.thaw.runtime.gpu.GpuDriverProvider}): the API names no implementation, the way
 * Vert.x loads its transports. Implementations have a public no-argument constructor and are cheap to make; the work
 * is in {@link #availability()} and {@link #open}.
 */
public interface GpuDriverProvider {

  /** The choice this driver answers: {@link DeviceChoice#CUDA} or {@link DeviceChoice#SIM}. */
  DeviceChoice choice();

  /** Whether it can be opened here and, if not, why. Never throws; computed once where it is costly. */
  DriverAvailability availability();

  /**
   * Opens it, configured from {@code environment} where it has settings (the simulated device's {@code THAW_SIM_*}).
   *
   * @throws GpuUnavailableException if it is not available, with the reason
   * @throws IllegalArgumentException if a setting in {@code environment} does not parse
   */
  GpuDriver open(Map<String, String> environment);
}
