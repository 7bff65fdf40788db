package dev.thaw.image.restore;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where a full restore's time went, in milliseconds: the baseline on-demand restore is compared with.
 *
 * @param openMillis reading and checking the manifest, loading the function class
 * @param mapMillis mapping every allocation at its recorded address
 * @param modulesMillis reading the cubins and loading the modules (a JIT from PTX on another architecture)
 * @param copyMillis reading every chunk, verifying its digest and copying it to the device, pipelined
 * @param stateMillis reading the host state back
 * @param totalMillis all of it
 * @param bytes device bytes restored
 */
public record RestoreTimings(double openMillis, double mapMillis, double modulesMillis, double copyMillis,
    double stateMillis, double totalMillis, long bytes) {

  /** Verified bytes onto the device per second, in GB/s (10^9). */
  public double copyGBps() {
    return copyMillis <= 0 ? Double.NaN : bytes / (copyMillis * 1e6);
  }

  /** The phases in order, for printing. */
  public Map<String, Double> phases() {
    Map<String, Double> m = new LinkedHashMap<>();
    m.put("open manifest", openMillis);
    m.put("map allocations", mapMillis);
    m.put("load modules", modulesMillis);
    m.put("copy + verify", copyMillis);
    m.put("rebuild state", stateMillis);
    return m;
  }
}
