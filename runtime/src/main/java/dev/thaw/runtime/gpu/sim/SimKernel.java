package dev.thaw.runtime.gpu.sim;

import java.util.ServiceLoader;

/**
 * A kernel for the simulated device, written in Java: what runs when a PTX {@code .entry} of the same name
 * is launched on the sim driver.
 *
 * <h2>Registering</h2>
 * List the implementation in {@code META-INF/services/dev.thaw.runtime.gpu.sim.SimKernel}; each
 * {@link SimDriver} discovers them once, when it opens, through {@link ServiceLoader} (or call
 * {@link SimDriver#registerKernel}). It needs a public no-argument constructor. Two kernels with one entry
 * name are an error. A module whose PTX names an entry with no Java kernel still loads; asking it for that
 * kernel fails with {@code CUDA_ERROR_NOT_FOUND}.
 *
 * <h2>Writing one</h2>
 * {@link #launch} computes the <em>whole grid</em> in one call, on the stream's worker thread: loop over
 * {@code grid × block} yourself (or over the data, when the result is the same). Read the arguments from
 * {@link SimLaunch} by index, as the PTX {@code .entry} declares them, and touch device memory only through
 * {@link SimLaunch#memory()}: every access is bounds-checked and recorded, which is what makes speculation
 * validation on the sim device exact. Do not keep the view, or any state, past the call: one instance serves
 * every launch, from several streams at once, so it must be stateless or thread-safe. Do not start threads
 * that touch the view.
 *
 * <p>A kernel should touch exactly what its CUDA twin touches: the same reads and writes, in bytes, for the
 * same arguments; results should match to the precision the function's tests expect.
 *
 * <h2>Failures</h2>
 * An access outside mapped memory (or a store to read-only memory) ends the launch and poisons the context
 * with {@code CUDA_ERROR_ILLEGAL_ADDRESS}; any other exception thrown from {@code launch} poisons it with
 * {@code CUDA_ERROR_LAUNCH_FAILED}. Either surfaces at the next synchronization, as on a GPU.
 */
public interface SimKernel {

  /** The PTX {@code .entry} name this kernel implements, e.g. {@code matmul_f32}. */
  String entry();

  /** Runs the whole grid. */
  void launch(SimLaunch launch);
}
