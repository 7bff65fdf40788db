package dev.thaw.runtime.gpu;

/**
 * A kernel of a loaded module, with its parameter layout.
 *
 * <p>Arguments are checked against {@link #params()} before the driver is called: a wrong count or a
 * value of the wrong type is an {@link IllegalArgumentException}.
 */
public interface Kernel {

  String name();

  GpuModule module();

  /** The parameter layout: from the PTX {@code .entry} when known, else from {@code cuFuncGetParamInfo}. */
  ParamLayout params();

  /** A fresh, reusable argument slab for this kernel. Not thread-safe: one per launching thread. */
  default KernelArgs newArgs() {
    return new KernelArgs(params());
  }

  /**
   * Launches with arguments already marshalled into {@code args}. The hot path: nothing is allocated.
   *
   * @throws IllegalArgumentException if {@code args} was made for another layout, a parameter is unset,
   *     or a dimension is out of range
   */
  void launch(Dim3 grid, Dim3 block, int sharedMemBytes, GpuStream stream, KernelArgs args);

  /**
   * Launches with typed arguments, one per parameter: {@code Integer}, {@code Long} (or a {@link DeviceBuffer}
   * for its address), {@code Float}, {@code Double}, {@code Short}, {@code Byte}, or {@code byte[]} for a
   * struct parameter of exactly its size. Marshals into a slab cached per thread.
   */
  void launch(Dim3 grid, Dim3 block, GpuStream stream, Object... args);
}
