package dev.thaw.runtime.gpu;

/**
 * A CUDA driver call failed. Carries the call, the numeric {@code CUresult} and its name; the simulated
 * device reports the same codes a GPU would for the same mistake.
 */
public class CudaException extends RuntimeException {

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
}
