package dev.thaw.runtime.gpu;

/**
 * Whether a driver can be used here, and if not, why ({@code "libcuda.so.1 not found"},
 * {@code "cuInit failed: CUDA_ERROR_NO_DEVICE (100)"}).
 */
public record DriverAvailability(boolean available, String unavailabilityCause) {

  public static DriverAvailability yes() {
    return new DriverAvailability(true, null);
  }

  public static DriverAvailability no(String cause) {
    return new DriverAvailability(false, cause);
  }
}
