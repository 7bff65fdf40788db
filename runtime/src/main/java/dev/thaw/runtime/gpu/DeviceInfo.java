package dev.thaw.runtime.gpu;

/**
 * What a device is.
 *
 * @param ordinal the device's index in {@link GpuDriver#devices()}
 * @param name the marketing name, e.g. {@code NVIDIA H200}
 * @param computeCapabilityMajor e.g. 9 for sm_90
 * @param computeCapabilityMinor e.g. 0 for sm_90
 * @param totalMemoryBytes device memory in bytes
 * @param uuid the device UUID as {@code nvidia-smi} prints it ({@code GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx})
 * @param multiprocessorCount streaming multiprocessors
 */
public record DeviceInfo(
    int ordinal,
    String name,
    int computeCapabilityMajor,
    int computeCapabilityMinor,
    long totalMemoryBytes,
    String uuid,
    int multiprocessorCount) {

  /** {@code sm_90} for compute capability 9.0. */
  public String smArch() {
    return "sm_" + computeCapabilityMajor + computeCapabilityMinor;
  }

  /** One line for logs and run records: {@code NVIDIA H200 (sm_90, 139.8 GiB, 132 SMs, GPU-...)}. */
  public String describe() {
    return String.format("%s (%s, %.1f GiB, %d SMs, %s)", name, smArch(),
        totalMemoryBytes / (double) (1L << 30), multiprocessorCount, uuid);
  }
}
