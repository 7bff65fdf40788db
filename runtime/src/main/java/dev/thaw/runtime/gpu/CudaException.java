package dev.thaw.runtime.gpu;

import java.util.Set;

/**
 * A CUDA driver call failed. Carries the call, the numeric {@code CUresult} and its name; the simulated
 * device reports the same codes a GPU would for the same mistake.
 */
public class CudaException extends RuntimeException {

  /**
   * CUresults after which the context, and so the process, is unusable: "any further CUDA work will return the
   * same error; the process must be terminated and relaunched" (illegal address, launch timeout, hardware stack
   * error, illegal instruction, misaligned address, invalid address space, invalid PC, launch failed), and
   * CUDA_ERROR_UNKNOWN, which promises nothing.
   */
  private static final Set<Integer> STICKY = Set.of(700, 702, 714, 715, 716, 717, 718, 719, 999);

  private final String call;
  private final int code;
  private final String errorName;

  public CudaException(String call, int code, String errorName, String detail) {
    super(call + " failed: " + errorName + " (" + code + ")" + (detail == null || detail.isEmpty() ? "" : ": " + detail));
    this.call = call;
    this.code = code;
    this.errorName = errorName;
  }

  /** The exception for a failed call: {@link CudaOutOfMemoryException} for out-of-memory, else this type. */
  public static CudaException of(String call, int code, String errorName, String detail) {
    return code == CudaError.CUDA_ERROR_OUT_OF_MEMORY
        ? new CudaOutOfMemoryException(call, code, errorName, detail)
        : new CudaException(call, code, errorName, detail);
  }

  /** The driver function that failed, e.g. {@code cuMemCreate}. */
  public String call() {
    return call;
  }

  /** The {@code CUresult} code. */
  public int code() {
    return code;
  }

  /** The {@code CUresult} name, e.g. {@code CUDA_ERROR_OUT_OF_MEMORY}. */
  public String errorName() {
    return errorName;
  }

  /** True if no CUDA work in this process can succeed after this error: the process must end. */
  public boolean isSticky() {
    return STICKY.contains(code);
  }

  /** The sticky CUDA error in {@code t}'s cause chain (see {@link #isSticky()}), or null. */
  public static CudaException stickyIn(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof CudaException e && e.isSticky()) {
        return e;
      }
    }
    return null;
  }
}
