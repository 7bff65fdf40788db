package dev.thaw.runtime.gpu.sim;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.gpu.DeviceInfo;
import java.util.Locale;
import java.util.Map;

/**
 * Settings of the simulated device. Defaults suit tests and laptops; the environment can change them
 * ({@code THAW_SIM_MEMORY}, e.g. {@code 16g}; {@code THAW_SIM_COPY_GBPS}, e.g. {@code 55}; {@code THAW_SIM_DEVICES},
 * e.g. {@code 2}; {@code THAW_SIM_PEER_GBPS}, e.g. {@code 390}; {@code THAW_SIM_PEER_ACCESS}, {@code 0} or {@code 1}).
 *
 * <p>The copy-bandwidth model, off by default, makes every host↔device copy take {@code bytes / GB/s}, so
 * restore strategies can be compared without a GPU; the peer-link model does the same for copies between two
 * devices' memory. Each stream copies at the modelled rate whatever the other streams do: one device's host link
 * is not shared between its streams, so the model says what several devices' links give together, not what
 * several streams of one device would. Whatever is measured with it is simulated, not GPU, time.
 */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class SimOptions {

  public static final long DEFAULT_MEMORY_BYTES = 16L << 30;
  public static final double DEFAULT_COPY_GBPS = 0;
  public static final String DEFAULT_DEVICE_NAME = "Thaw simulated device";
  public static final int DEFAULT_COMPUTE_CAPABILITY_MAJOR = 9;
  public static final int DEFAULT_COMPUTE_CAPABILITY_MINOR = 0;
  public static final int DEFAULT_DEVICE_COUNT = 1;
  /** An H100/H200's streaming multiprocessors. */
  public static final int DEFAULT_MULTIPROCESSOR_COUNT = 132;
  public static final double DEFAULT_PEER_GBPS = 0;
  public static final boolean DEFAULT_PEER_ACCESS = true;
  /** More simulated devices than a host has GPUs is a typo, not a test. */
  public static final int MAX_DEVICE_COUNT = 16;

  private static final ObjectMapper JSON = new ObjectMapper();

  @JsonProperty private long memoryBytes = DEFAULT_MEMORY_BYTES;
  @JsonProperty private double copyGBps = DEFAULT_COPY_GBPS;
  @JsonProperty private String deviceName = DEFAULT_DEVICE_NAME;
  @JsonProperty private int computeCapabilityMajor = DEFAULT_COMPUTE_CAPABILITY_MAJOR;
  @JsonProperty private int computeCapabilityMinor = DEFAULT_COMPUTE_CAPABILITY_MINOR;
  @JsonProperty private int deviceCount = DEFAULT_DEVICE_COUNT;
  @JsonProperty private int multiprocessorCount = DEFAULT_MULTIPROCESSOR_COUNT;
  @JsonProperty private double peerGBps = DEFAULT_PEER_GBPS;
  @JsonProperty private boolean peerAccess = DEFAULT_PEER_ACCESS;

  /** Device memory the simulated device offers; creating more fails with out-of-memory. */
  public long memoryBytes() {
    return memoryBytes;
  }

  public SimOptions setMemoryBytes(long bytes) {
    if (bytes <= 0) {
      throw new IllegalArgumentException("simulated memory must be positive: " + bytes);
    }
    this.memoryBytes = bytes;
    return this;
  }

  /** Host↔device copy bandwidth in GB/s (10^9 bytes a second); 0 copies as fast as the host can. */
  public double copyGBps() {
    return copyGBps;
  }

  public SimOptions setCopyGBps(double gbps) {
    if (!(gbps >= 0) || Double.isInfinite(gbps)) {
      throw new IllegalArgumentException("copy bandwidth must be a finite number of GB/s, 0 for none: " + gbps);
    }
    this.copyGBps = gbps;
    return this;
  }

  public String deviceName() {
    return deviceName;
  }

  public SimOptions setDeviceName(String name) {
    this.deviceName = name;
    return this;
  }

  public int computeCapabilityMajor() {
    return computeCapabilityMajor;
  }

  public int computeCapabilityMinor() {
    return computeCapabilityMinor;
  }

  public SimOptions setComputeCapability(int major, int minor) {
    this.computeCapabilityMajor = major;
    this.computeCapabilityMinor = minor;
    return this;
  }

  /**
   * How many devices the driver lists (ordinals 0 to n-1), each with {@link #memoryBytes()}: for placement over
   * several GPUs without them. The contexts of one driver share one address space and one memory counter whatever
   * their device, as one process's would share its address space; a worker process uses one device.
   */
  public int deviceCount() {
    return deviceCount;
  }

  public SimOptions setDeviceCount(int n) {
    if (n < 1 || n > MAX_DEVICE_COUNT) {
      throw new IllegalArgumentException("simulated devices: 1 to " + MAX_DEVICE_COUNT + ", not " + n);
    }
    this.deviceCount = n;
    return this;
  }

  /**
   * The SMs each device reports ({@link DeviceInfo#multiprocessorCount()}): code that sizes
   * its launches by them (a grid per wave) sees a smaller or larger GPU. Nothing runs faster or slower.
   */
  public int multiprocessorCount() {
    return multiprocessorCount;
  }

  public SimOptions setMultiprocessorCount(int n) {
    if (n < 1 || n > 1024) {
      throw new IllegalArgumentException("simulated SMs: 1 to 1024, not " + n);
    }
    this.multiprocessorCount = n;
    return this;
  }

  /** Bandwidth between two devices in GB/s (two H200s' NVLink: 393); 0 as fast as the host. */
  public double peerGBps() {
    return peerGBps;
  }

  public SimOptions setPeerGBps(double gbps) {
    if (!(gbps >= 0) || Double.isInfinite(gbps)) {
      throw new IllegalArgumentException("peer bandwidth must be a finite number of GB/s, 0 for none: " + gbps);
    }
    this.peerGBps = gbps;
    return this;
  }

  /**
   * Whether the devices can reach each other's memory ({@link SimDriver#canAccessPeer}): true, as GPUs joined by
   * NVLink; false models a host whose GPUs cannot, where granting another device access fails.
   */
  public boolean peerAccess() {
    return peerAccess;
  }

  public SimOptions setPeerAccess(boolean on) {
    this.peerAccess = on;
    return this;
  }

  /**
   * Defaults, changed by {@code THAW_SIM_MEMORY}, {@code THAW_SIM_COPY_GBPS}, {@code THAW_SIM_DEVICES},
   * {@code THAW_SIM_PEER_GBPS} and {@code THAW_SIM_PEER_ACCESS} where set.
   */
  public static SimOptions fromEnvironment() {
    return fromEnvironment(System.getenv());
  }

  static SimOptions fromEnvironment(Map<String, String> env) {
    SimOptions options = new SimOptions();
    String memory = env.get("THAW_SIM_MEMORY");
    if (memory != null && !memory.isBlank()) {
      options.setMemoryBytes(parseBytes("THAW_SIM_MEMORY", memory));
    }
    String gbps = env.get("THAW_SIM_COPY_GBPS");
    if (gbps != null && !gbps.isBlank()) {
      try {
        options.setCopyGBps(Double.parseDouble(gbps.strip()));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("THAW_SIM_COPY_GBPS=" + gbps + " is not a number of GB/s");
      }
    }
    String devices = env.get("THAW_SIM_DEVICES");
    if (devices != null && !devices.isBlank()) {
      try {
        options.setDeviceCount(Integer.parseInt(devices.strip()));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("THAW_SIM_DEVICES=" + devices + " is not a number of devices");
      }
    }
    String peer = env.get("THAW_SIM_PEER_GBPS");
    if (peer != null && !peer.isBlank()) {
      try {
        options.setPeerGBps(Double.parseDouble(peer.strip()));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("THAW_SIM_PEER_GBPS=" + peer + " is not a number of GB/s");
      }
    }
    String access = env.get("THAW_SIM_PEER_ACCESS");
    if (access != null && !access.isBlank()) {
      options.setPeerAccess(switch (access.strip().toLowerCase(Locale.ROOT)) {
        case "1", "true", "yes" -> true;
        case "0", "false", "no" -> false;
        default -> throw new IllegalArgumentException("THAW_SIM_PEER_ACCESS=" + access + " is not 0 or 1");
      });
    }
    return options;
  }

  /** {@code 1073741824}, {@code 512m}, {@code 16g} or {@code 16GiB}. */
  static long parseBytes(String name, String value) {
    String v = value.strip().toLowerCase(Locale.ROOT).replace("ib", "").replace("b", "");
    long unit = 1;
    char last = v.isEmpty() ? ' ' : v.charAt(v.length() - 1);
    if (last == 'k' || last == 'm' || last == 'g' || last == 't') {
      unit = switch (last) {
        case 'k' -> 1L << 10;
        case 'm' -> 1L << 20;
        case 'g' -> 1L << 30;
        default -> 1L << 40;
      };
      v = v.substring(0, v.length() - 1);
    }
    try {
      return Math.multiplyExact(Long.parseLong(v.strip()), unit);
    } catch (NumberFormatException | ArithmeticException e) {
      throw new IllegalArgumentException(name + "=" + value + " is not a size (e.g. 16g, 512m, 1073741824)");
    }
  }

  public String toJson() {
    try {
      return JSON.writeValueAsString(this);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  public static SimOptions fromJson(String json) {
    try {
      SimOptions o = JSON.readValue(json, SimOptions.class);
      // Re-validate through the setters: JSON is input.
      return new SimOptions().setMemoryBytes(o.memoryBytes).setCopyGBps(o.copyGBps).setDeviceName(o.deviceName)
          .setComputeCapability(o.computeCapabilityMajor, o.computeCapabilityMinor).setDeviceCount(o.deviceCount)
          .setMultiprocessorCount(o.multiprocessorCount)
          .setPeerGBps(o.peerGBps).setPeerAccess(o.peerAccess);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not a SimOptions JSON object: " + e.getOriginalMessage());
    }
  }
}
