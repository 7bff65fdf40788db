package dev.thaw.examples.function;

import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Kernel;
import dev.thaw.runtime.gpu.KernelArgs;

/**
 * One kernel's launch state in a launcher class ({@code Gpt2Kernels}, {@code LlamaKernels}): its argument slab,
 * its block, its dynamic shared memory, and the last grid, reused while unchanged, so a launch allocates nothing.
 * Not thread-safe.
 */
public final class KernelLaunch {

  private final Kernel kernel;
  private final KernelArgs args;
  private final Dim3 block;
  private final int sharedBytes;
  private Dim3 grid = Dim3.of(1);

  public KernelLaunch(Kernel kernel, int threads) {
    this(kernel, threads, 0);
  }

  /**
   * With {@code sharedBytes} of dynamic shared memory per launch; above 48 KiB the caller raises the kernel's
   * limit first ({@link Kernel#setMaxDynamicSharedMemory}).
   */
  public KernelLaunch(Kernel kernel, int threads, int sharedBytes) {
    this.kernel = kernel;
    this.args = kernel.newArgs();
    this.block = Dim3.of(threads);
    this.sharedBytes = sharedBytes;
  }

  /** The argument slab: set every parameter, then {@link #launch}. */
  public KernelArgs args() {
    return args;
  }

  public void launch(GpuStream stream, int gridX, int gridY) {
    if (grid.x() != gridX || grid.y() != gridY || grid.z() != 1) {
      grid = Dim3.of(gridX, gridY);
    }
    kernel.launch(grid, block, sharedBytes, stream, args);
  }

  /** A launch on a three-dimensional grid (kept while unchanged, as the two-dimensional one). */
  public void launch(GpuStream stream, int gridX, int gridY, int gridZ) {
    if (grid.x() != gridX || grid.y() != gridY || grid.z() != gridZ) {
      grid = new Dim3(gridX, gridY, gridZ);
    }
    kernel.launch(grid, block, sharedBytes, stream, args);
  }

  // ---- argument checks the launchers share ----

  public static void positive(String name, int value) {
    if (value <= 0) {
      throw new IllegalArgumentException(name + " must be positive: " + value);
    }
  }

  public static void address(String name, long address) {
    if (address == 0) {
      throw new IllegalArgumentException(name + " is a null device address");
    }
  }

  /** A non-null address that is a multiple of {@code alignment} bytes. */
  public static void aligned(String name, long address, int alignment) {
    address(name, address);
    if (address % alignment != 0) {
      throw new IllegalArgumentException(String.format("%s must be %d-byte aligned: 0x%x", name, alignment,
          address));
    }
  }
}
