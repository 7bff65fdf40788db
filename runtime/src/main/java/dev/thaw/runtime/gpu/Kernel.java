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

  /** Dynamic shared memory a launch may ask for without {@link #setMaxDynamicSharedMemory} (48 KiB). */
  int DEFAULT_MAX_DYNAMIC_SHARED_MEMORY = 48 << 10;

  /**
   * Lets launches of this kernel ask for up to {@code bytes} of dynamic shared memory ({@code cuFuncSetAttribute}
   * with {@code CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES}); without it a launch may ask for
   * {@link #DEFAULT_MAX_DYNAMIC_SHARED_MEMORY} less the kernel's static shared memory. Call it once, where the
   * kernel is looked up; a call that asks for no more than an earlier one allowed does nothing.
   *
   * @throws CudaException {@code CUDA_ERROR_INVALID_VALUE} when {@code bytes} plus the kernel's static shared
   *     memory exceed what the device lets one block opt in to (227 KiB on sm_90)
   * @throws IllegalArgumentException if {@code bytes} is negative
   */
  void setMaxDynamicSharedMemory(int bytes);

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
