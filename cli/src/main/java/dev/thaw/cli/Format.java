package dev.thaw.cli;

import java.util.Locale;
import java.util.Map;

/** How the CLI writes sizes and timings. */
final class Format {

  private Format() {}

  /** {@code 1.5 GiB}, {@code 512 B}. */
  static String bytes(long n) {
    if (n < 1024) {
      return n + " B";
    }
    String[] units = {"KiB", "MiB", "GiB", "TiB"};
    double v = n;
    int u = -1;
    while (v >= 1024 && u < units.length - 1) {
      v /= 1024;
      u++;
    }
    return String.format(Locale.ROOT, "%.1f %s", v, units[u]);
  }

  static String millis(double ms) {
    return String.format(Locale.ROOT, "%.3f ms", ms);
  }

  /** A phase table: {@code   name    12.345 ms}. */
  static String phases(Map<String, Double> phases) {
    int width = phases.keySet().stream().mapToInt(String::length).max().orElse(0);
    StringBuilder sb = new StringBuilder();
    phases.forEach((name, ms) -> sb.append(String.format(Locale.ROOT, "  %-" + width + "s  %12s%n", name,
        millis(ms))));
    return sb.toString();
  }
}
