package dev.thaw.runtime.gpu;

import java.util.List;

/**
 * A GPU driver: the one door through which Thaw touches a device.
 *
 * <p>Two implementations exist: {@code cuda} (the CUDA Driver API through JNA) and {@code sim} (a simulated
 * device for machines without a GPU). Both honour the same contract, pinned by one contract test suite.
 * Obtain one with {@link GpuDrivers#open()}.
 *
 * <p>Every object a driver hands out is {@link AutoCloseable} with an idempotent {@code close()}; using an
 * object after it was closed throws {@link IllegalStateException}. Driver errors are {@link CudaException}s
 * (the simulated device reports the same codes a GPU would).
 */
public interface GpuDriver extends AutoCloseable {

  /** {@code "cuda"} or {@code "sim"}. */
  String name();

  /** True for the simulated device: nothing it measures is a GPU number. */
  boolean isSimulated();

  /** The driver's version as CUDA writes it ({@code 13000} for 13.0); the sim device reports the CUDA version it mimics. */
  int driverVersion();

  /** The visible devices, by ordinal. */
  List<DeviceInfo> devices();

  /**
   * Creates a context on the device with that ordinal and makes it current on the calling thread.
   *
   * @throws IllegalArgumentException if no device has that ordinal
   */
  GpuContext createContext(int deviceOrdinal);

  /**
   * Does now, on the calling thread, what the process's first context on that device would otherwise do itself
   * (CUDA: retain the device's primary context and reserve the process's device address arena in it), so that a
   * process creating its first context on another thread meanwhile may overlap the two. Nothing by default.
   *
   * @throws IllegalArgumentException if no device has that ordinal
   */
  default void prepareDevice(int deviceOrdinal) {
    if (deviceOrdinal < 0 || deviceOrdinal >= devices().size()) {
      throw new IllegalArgumentException("no device has ordinal " + deviceOrdinal);
    }
  }

  /** Releases what the driver holds. Contexts still open are not closed for the caller. */
  @Override
  void close();
}
