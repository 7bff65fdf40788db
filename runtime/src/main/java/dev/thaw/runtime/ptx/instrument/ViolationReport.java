package dev.thaw.runtime.ptx.instrument;

import java.util.List;

/**
 * The violations of one launch (or of launches since the last reset).
 *
 * @param total how many violating accesses happened, counting those not recorded
 * @param recorded the first ones, up to the table's capacity, in the order the device recorded them (which
 *     is not deterministic between threads)
 */
public record ViolationReport(long total, List<GuardViolation> recorded) {

  public ViolationReport {
    recorded = List.copyOf(recorded);
  }

  public boolean clean() {
    return total == 0;
  }

  /** True when more violations happened than the table could record. */
  public boolean truncated() {
    return total > recorded.size();
  }
}
