package dev.thaw.runtime.check;

import com.fasterxml.jackson.annotation.JsonAutoDetect;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * What {@link DeviceCheck} does: on which device, with how much data, how many empty launches, from which seed.
 * Defaults are sized for a GPU: 64 MiB buffers make the copy bandwidth meaningful.
 */
@JsonAutoDetect(fieldVisibility = JsonAutoDetect.Visibility.ANY, getterVisibility = JsonAutoDetect.Visibility.NONE,
    isGetterVisibility = JsonAutoDetect.Visibility.NONE, setterVisibility = JsonAutoDetect.Visibility.NONE)
public final class DeviceCheckOptions {

  public static final int DEFAULT_DEVICE_ORDINAL = 0;
  /** 16 Mi floats: 64 MiB for each of x and y. */
  public static final int DEFAULT_ELEMENTS = 16 << 20;
  /** 256 Mi floats: 1 GiB a buffer. */
  public static final int MAX_ELEMENTS = 1 << 28;
  public static final int DEFAULT_EMPTY_LAUNCHES = 10_000;
  public static final long DEFAULT_SEED = 0x7468617721L;

  private static final ObjectMapper JSON = new ObjectMapper();

  @JsonProperty private int deviceOrdinal = DEFAULT_DEVICE_ORDINAL;
  @JsonProperty private int elements = DEFAULT_ELEMENTS;
  @JsonProperty private int emptyLaunches = DEFAULT_EMPTY_LAUNCHES;
  @JsonProperty private long seed = DEFAULT_SEED;

  public int deviceOrdinal() {
    return deviceOrdinal;
  }

  public DeviceCheckOptions setDeviceOrdinal(int ordinal) {
    if (ordinal < 0) {
      throw new IllegalArgumentException("device ordinal must not be negative: " + ordinal);
    }
    this.deviceOrdinal = ordinal;
    return this;
  }

  /** Floats in each of the saxpy buffers x and y; the u32 fill covers as many words. */
  public int elements() {
    return elements;
  }

  public DeviceCheckOptions setElements(int count) {
    // Bounded so that each pinned buffer (4 bytes an element) stays within one ByteBuffer view.
    if (count < 1 || count > MAX_ELEMENTS) {
      throw new IllegalArgumentException("elements must be in [1, " + MAX_ELEMENTS + "]: " + count);
    }
    this.elements = count;
    return this;
  }

  /** Launches of {@code thaw_empty} timed for the per-launch overhead. */
  public int emptyLaunches() {
    return emptyLaunches;
  }

  public DeviceCheckOptions setEmptyLaunches(int count) {
    if (count < 1) {
      throw new IllegalArgumentException("empty launches must be at least 1: " + count);
    }
    this.emptyLaunches = count;
    return this;
  }

  /** Seed of the pseudo-random saxpy inputs; a failure is reproducible from it. */
  public long seed() {
    return seed;
  }

  public DeviceCheckOptions setSeed(long seed) {
    this.seed = seed;
    return this;
  }

  public String toJson() {
    try {
      return JSON.writeValueAsString(this);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  public static DeviceCheckOptions fromJson(String json) {
    try {
      DeviceCheckOptions o = JSON.readValue(json, DeviceCheckOptions.class);
      // Re-validate through the setters: JSON is input.
      return new DeviceCheckOptions().setDeviceOrdinal(o.deviceOrdinal).setElements(o.elements)
          .setEmptyLaunches(o.emptyLaunches).setSeed(o.seed);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not a DeviceCheckOptions JSON object: " + e.getOriginalMessage());
    }
  }
}
