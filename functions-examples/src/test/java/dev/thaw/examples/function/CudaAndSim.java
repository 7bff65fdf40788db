package dev.thaw.examples.function;

import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.function.Function;
import org.junit.jupiter.api.Assumptions;

/**
 * A kernel test device on the CUDA driver and its twin on the sim driver, for tests that run every case on both
 * and compare: opened where a GPU is usable, else {@link #cuda} and {@link #sim} are null and the tests skip with
 * the reason ({@link #assumeGpu}).
 */
public final class CudaAndSim<D extends KernelTestDevice> implements AutoCloseable {

  public final D cuda;
  public final D sim;
  private final CudaDriver cudaDriver;
  private final SimDriver simDriver;

  private CudaAndSim(CudaDriver cudaDriver, D cuda, SimDriver simDriver, D sim) {
    this.cudaDriver = cudaDriver;
    this.cuda = cuda;
    this.simDriver = simDriver;
    this.sim = sim;
  }

  /** Both devices, made by {@code device} on each driver, where a GPU is usable; none otherwise. */
  public static <D extends KernelTestDevice> CudaAndSim<D> openIfGpu(Function<GpuDriver, D> device) {
    if (!CudaDriver.availability().available()) {
      return new CudaAndSim<>(null, null, null, null);
    }
    CudaDriver cudaDriver = CudaDriver.open();
    D cuda = device.apply(cudaDriver);
    SimDriver simDriver = SimDriver.open(new SimOptions());
    return new CudaAndSim<>(cudaDriver, cuda, simDriver, device.apply(simDriver));
  }

  /** Skips the test, naming the reason, where no GPU is usable. */
  public static void assumeGpu() {
    DriverAvailability a = CudaDriver.availability();
    Assumptions.assumeTrue(a.available(), () -> "no usable GPU: " + a.unavailabilityCause());
  }

  /** Frees what the last case uploaded on both devices. */
  public void freeBuffers() {
    if (cuda != null) {
      cuda.freeBuffers();
      sim.freeBuffers();
    }
  }

  @Override
  public void close() {
    if (cuda != null) {
      cuda.close();
      sim.close();
    }
    if (cudaDriver != null) {
      cudaDriver.close();
      simDriver.close();
    }
  }
}
