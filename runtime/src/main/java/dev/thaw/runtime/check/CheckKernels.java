package dev.thaw.runtime.check;

import dev.thaw.runtime.gpu.PtxResources;

/**
 * The device-check kernels bundled with the runtime: their entry names, their PTX ({@code check.ptx},
 * built from {@code runtime/src/main/cuda/check.cu} by {@code build-ptx.sh}) and the host reference of what
 * each computes.
 *
 * <p>Every kernel is grid-stride, so any grid of at least one thread covers all {@code n} elements; the
 * references therefore ignore launch dimensions.
 */
public final class CheckKernels {

  /** Classpath resource of the PTX (compute_80, so the driver JIT-compiles it for any newer GPU). */
  public static final String PTX_RESOURCE = "/dev/thaw/runtime/check/check.ptx";

  /** {@code thaw_empty()}: does nothing; for launch overhead. */
  public static final String EMPTY = "thaw_empty";

  /** {@code thaw_saxpy(float a, const float* x, float* y, int n)}: {@code y = a * x + y}, fused. */
  public static final String SAXPY = "thaw_saxpy";

  /** {@code thaw_fill_u32(unsigned* p, unsigned v, int n)}: {@code p[0..n) = v}. */
  public static final String FILL_U32 = "thaw_fill_u32";

  private CheckKernels() {}

  /** The bundled PTX text. */
  public static String ptx() {
    return PtxResources.read(CheckKernels.class, PTX_RESOURCE);
  }

  /**
   * One element of {@code thaw_saxpy}. nvcc contracts {@code a * x + y} into a single {@code fma.rn.f32};
   * {@link Math#fma(float, float, float)} rounds once as well, so the two agree bit for bit.
   */
  public static float saxpy(float a, float x, float y) {
    return Math.fma(a, x, y);
  }
}
