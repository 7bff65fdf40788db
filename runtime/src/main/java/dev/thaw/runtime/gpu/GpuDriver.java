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

  /**
   * True when the copy engines and kernels of {@code device} can reach memory that lives on {@code peerDevice} once
   * it is mapped with access for {@code device} ({@link Mapping#setAccessFor}): the two are joined by NVLink or a
   * PCIe switch that carries peer traffic ({@code cuDeviceCanAccessPeer}). False on a single-device host.
   *
   * @throws IllegalArgumentException if an ordinal names no device, or both name the same one
   */
  default boolean canAccessPeer(int device, int peerDevice) {
    checkPeerOrdinals(this, device, peerDevice);
    return false;
  }

  /** The check {@link #canAccessPeer} makes of its arguments, for implementations. */
  static void checkPeerOrdinals(GpuDriver driver, int device, int peerDevice) {
    int n = driver.devices().size();
    if (device < 0 || device >= n || peerDevice < 0 || peerDevice >= n) {
      throw new IllegalArgumentException("no device pair " + device + ", " + peerDevice + "; " + n + " visible");
    }
    if (device == peerDevice) {
      throw new IllegalArgumentException("device " + device + " is not its own peer");
    }
  }

  /** Releases what the driver holds. Contexts still open are not closed for the caller. */
  @Override
  void close();
}
