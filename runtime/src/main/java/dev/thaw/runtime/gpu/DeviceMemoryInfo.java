package dev.thaw.runtime.gpu;

/**
 * A device's memory as {@code cuMemGetInfo_v2} reports it.
 *
 * @param freeBytes bytes no process holds now
 * @param totalBytes the device's memory
 */
public record DeviceMemoryInfo(long freeBytes, long totalBytes) {

  public DeviceMemoryInfo {
    if (freeBytes < 0 || totalBytes < 0 || freeBytes > totalBytes) {
      throw new IllegalArgumentException("free " + freeBytes + " of " + totalBytes + " bytes");
    }
  }

  public long usedBytes() {
    return totalBytes - freeBytes;
  }
}
