package dev.thaw.runtime.gpu;

import dev.thaw.runtime.host.Threads;
import java.util.EnumMap;
import java.util.Locale;
import java.util.Map;
import java.util.ServiceLoader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Picks the driver: CUDA when a GPU is usable, else the simulated device, saying why in the log.
 * {@code THAW_DEVICE=cuda|sim} forces one; forcing {@code cuda} without a usable GPU fails with the reason. The
 * drivers are {@link GpuDriverProvider}s, found through {@link ServiceLoader}.
 */
public final class GpuDrivers {

  private static final Logger LOG = LoggerFactory.getLogger(GpuDrivers.class);

  private GpuDrivers() {}

  /** Loaded once, on first use: the class path is scanned for them then. */
  private static final class Providers {
    static final Map<DeviceChoice, GpuDriverProvider> BY_CHOICE = load();

    private static Map<DeviceChoice, GpuDriverProvider> load() {
      Map<DeviceChoice, GpuDriverProvider> found = new EnumMap<>(DeviceChoice.class);
      for (GpuDriverProvider p : ServiceLoader.load(GpuDriverProvider.class, GpuDrivers.class.getClassLoader())) {
        found.putIfAbsent(p.choice(), p);
      }
      return found;
    }
  }

  private static GpuDriverProvider provider(DeviceChoice choice) {
    GpuDriverProvider p = Providers.BY_CHOICE.get(choice);
    if (p == null) {
      throw new GpuUnavailableException("no " + choice.name().toLowerCase(Locale.ROOT)
          + " driver is on the class path (META-INF/services/" + GpuDriverProvider.class.getName() + ")");
    }
    return p;
  }

  /**
   * Starts the costly part of opening {@code choice} (CUDA's probe: loading {@code libcuda} and {@code cuInit}, a
   * quarter second on a GPU host) on a daemon thread now, so that a later {@link #open} finds it done: for a process
   * that will open a driver and has other work to do first. Nothing for {@link DeviceChoice#SIM}.
   */
  public static void openAhead(DeviceChoice choice) {
    if (choice == DeviceChoice.SIM) {
      return;
    }
    Threads.startDaemon(() -> {
      GpuDriverProvider cuda = Providers.BY_CHOICE.get(DeviceChoice.CUDA);
      if (cuda != null) {
        cuda.availability();
      }
    }, "thaw-cuda-init");
  }

  /** Opens the driver {@code THAW_DEVICE} asks for, or picks one. */
  public static GpuDriver open() {
    return open(DeviceChoice.fromEnvironment());
  }

  /** Opens the chosen driver, the simulated device set by {@code THAW_SIM_*}. */
  public static GpuDriver open(DeviceChoice choice) {
    return open(choice, System.getenv());
  }

  /**
   * Opens the chosen driver, configured from {@code environment} where it has settings (the simulated device's
   * {@code THAW_SIM_*}; an empty map gives its defaults).
   *
   * @throws GpuUnavailableException if {@code choice} is {@link DeviceChoice#CUDA} and no GPU is usable
   */
  public static GpuDriver open(DeviceChoice choice, Map<String, String> environment) {
    switch (choice) {
      case SIM:
        LOG.info("Using the simulated device ({}=sim); its timings are not GPU timings", DeviceChoice.ENV);
        return provider(DeviceChoice.SIM).open(environment);
      case CUDA: {
        DriverAvailability cuda = provider(DeviceChoice.CUDA).availability();
        if (!cuda.available()) {
          throw new GpuUnavailableException(DeviceChoice.ENV + "=cuda but no GPU is usable: "
              + cuda.unavailabilityCause());
        }
        return provider(DeviceChoice.CUDA).open(environment);
      }
      default: {
        DriverAvailability cuda = provider(DeviceChoice.CUDA).availability();
        if (cuda.available()) {
          return provider(DeviceChoice.CUDA).open(environment);
        }
        LOG.info("No usable GPU ({}); using the simulated device, whose timings are not GPU timings",
            cuda.unavailabilityCause());
        return provider(DeviceChoice.SIM).open(environment);
      }
    }
  }
}
