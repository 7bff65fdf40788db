package dev.thaw.image.build;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Where a build's time went, in milliseconds, and how fast device memory moved into the store.
 *
 * @param loadMillis loading the function class
 * @param initMillis {@code init} in the recording session
 * @param profileMillis the sample requests
 * @param snapshotMillis device → staging → chunks → hashes → store, overlapped
 * @param syncMillis making the chunks durable
 * @param commitMillis committing manifest and tag
 * @param totalMillis from load to commit
 * @param snapshotBytes device bytes snapshotted
 */
public record BuildTimings(double loadMillis, double initMillis, double profileMillis, double snapshotMillis,
    double syncMillis, double commitMillis, double totalMillis, long snapshotBytes) {

  /** Device bytes moved into the store per second, in GB/s (10^9), snapshot and sync together. */
  public double snapshotGBps() {
    double ms = snapshotMillis + syncMillis;
    return ms <= 0 ? Double.NaN : snapshotBytes / (ms * 1e6);
  }

  /** The phases in order, for printing. */
  public Map<String, Double> phases() {
    Map<String, Double> m = new LinkedHashMap<>();
    m.put("load function", loadMillis);
    m.put("init", initMillis);
    m.put("sample requests", profileMillis);
    m.put("snapshot", snapshotMillis);
    m.put("sync", syncMillis);
    m.put("commit", commitMillis);
    return m;
  }
}
