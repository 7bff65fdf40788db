package dev.thaw.examples.wait;

import dev.thaw.runtime.gpu.sim.SimKernel;
import dev.thaw.runtime.gpu.sim.SimLaunch;
import java.util.concurrent.locks.LockSupport;

/**
 * The Java twin of {@code wait.ptx} for the simulated device (listed in {@code
 * META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}). A GPU waits without taking a host core, so the twin
 * parks until shortly before the end and spins only the last {@value #SPIN_NANOS} ns, to end on time.
 */
public final class WaitSimKernels {

  /** The stretch at the end of a wait spent spinning, so that the wake-up from the park does not overshoot. */
  static final long SPIN_NANOS = 50_000;

  private WaitSimKernels() {}

  /** {@code wait_ns(unsigned long long nanos, unsigned long long* out)}. */
  public static final class Wait implements SimKernel {

    public static final String ENTRY = "wait_ns";

    @Override
    public String entry() {
      return ENTRY;
    }

    /** Waits {@code nanos}, then, as thread 0 of block 0 does, writes the nanoseconds waited to {@code out[0]}. */
    @Override
    public void launch(SimLaunch launch) {
      long nanos = launch.longArg(0);
      long out = launch.pointer(1);
      long start = System.nanoTime();
      long waited;
      while ((waited = System.nanoTime() - start) < nanos && !Thread.currentThread().isInterrupted()) {
        long left = nanos - waited;
        if (left > 2 * SPIN_NANOS) {
          LockSupport.parkNanos(left - SPIN_NANOS);
        } else {
          Thread.onSpinWait();
        }
      }
      launch.memory().putLong(out, waited);
    }
  }
}
