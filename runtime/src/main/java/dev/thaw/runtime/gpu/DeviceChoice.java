package dev.thaw.runtime.gpu;

import java.util.Locale;

/** Which driver to use: {@code THAW_DEVICE=cuda|sim}, or {@link #AUTO} to take a GPU when one is usable. */
public enum DeviceChoice {
  AUTO,
  CUDA,
  SIM;

  /** The environment variable that forces a choice. */
  public static final String ENV = "THAW_DEVICE";

  /**
   * Parses {@code auto}, {@code cuda} or {@code sim}, ignoring case; null or blank is {@link #AUTO}.
   *
   * @throws IllegalArgumentException for anything else, naming what is accepted
   */
  public static DeviceChoice parse(String value) {
    if (value == null || value.isBlank()) {
      return AUTO;
    }
    return switch (value.strip().toLowerCase(Locale.ROOT)) {
      case "auto" -> AUTO;
      case "cuda", "gpu" -> CUDA;
      case "sim" -> SIM;
      default -> throw new IllegalArgumentException(
          ENV + "=" + value + " is not a device choice; use cuda, sim or auto");
    };
  }

  /** The choice {@code THAW_DEVICE} makes. */
  public static DeviceChoice fromEnvironment() {
    return parse(System.getenv(ENV));
  }
}
