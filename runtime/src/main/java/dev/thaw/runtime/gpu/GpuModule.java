package dev.thaw.runtime.gpu;

import java.util.List;
import java.util.Optional;

/** A loaded module: the kernels of one PTX or cubin image. */
public interface GpuModule extends AutoCloseable {

  /** The PTX this module was compiled from; empty when it was loaded from a cubin. */
  Optional<String> ptx();

  /** The binary image the driver loaded: the JIT output for PTX, the input for a cubin. Can be stored and loaded again. */
  byte[] cubin();

  /** The JIT's info log (empty for a cubin). */
  String jitLog();

  /** The kernels named by the module's {@code .entry} directives, when the PTX is known; empty otherwise. */
  List<String> kernelNames();

  /**
   * The kernel with that entry name; looked up once and cached.
   *
   * @throws CudaException {@code CUDA_ERROR_NOT_FOUND} if there is none
   */
  Kernel kernel(String name);

  /** Unloads the module; its kernels become unusable. Idempotent. */
  @Override
  void close();
}
