package dev.thaw.runtime.check;

import dev.thaw.runtime.gpu.DeviceInfo;
import java.util.List;

/**
 * What {@link DeviceCheck} found. Phases are listed in the order they ran; a failed check lists those that
 * completed and names the one that failed in {@link #failure()}.
 *
 * <p>Measured figures are {@code NaN} when the check failed before measuring them. When {@link #simulated()}
 * is true none of them is a GPU number.
 *
 * @param driver {@code cuda} or {@code sim}
 * @param simulated true for the simulated device
 * @param driverVersion as CUDA writes it, {@code 13000} for 13.0
 * @param device {@link DeviceInfo#describe()} of the checked device, or empty if it was not reached
 * @param phases what ran, with timings
 * @param passed true when every phase ran and every result was exact
 * @param failure why the check failed: the phase and the reason; null when it passed
 * @param jitMillis PTX → cubin JIT and load
 * @param cubinBytes size of the JIT's cubin, -1 if not reached
 * @param cubinLoadMillis loading that cubin again
 * @param hostToDeviceGBps pinned host → device copy of x and y, by stream events (10^9 bytes a second)
 * @param deviceToHostGBps device → pinned host copy of y, by stream events
 * @param emptyLaunchMicros host time per {@code thaw_empty} launch over the batch, including its final synchronize
 */
public record DeviceCheckResult(
    String driver,
    boolean simulated,
    int driverVersion,
    String device,
    List<Phase> phases,
    boolean passed,
    String failure,
    double jitMillis,
    long cubinBytes,
    double cubinLoadMillis,
    double hostToDeviceGBps,
    double deviceToHostGBps,
    double emptyLaunchMicros) {

  public DeviceCheckResult {
    phases = List.copyOf(phases);
  }

  /**
   * One step of the check.
   *
   * @param name what it did, e.g. {@code load PTX (JIT)}
   * @param millis how long it took on the host clock
   * @param detail what it measured or verified, e.g. {@code 55.2 GB/s}; empty if nothing
   */
  public record Phase(String name, double millis, String detail) {}
}
