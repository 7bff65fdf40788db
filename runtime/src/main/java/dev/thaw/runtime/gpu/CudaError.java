package dev.thaw.runtime.gpu;

import java.util.Map;

/** The {@code CUresult} codes Thaw names itself (the CUDA driver names the rest through {@code cuGetErrorName}). */
public final class CudaError {

  public static final int CUDA_SUCCESS = 0;
  public static final int CUDA_ERROR_INVALID_VALUE = 1;
  public static final int CUDA_ERROR_OUT_OF_MEMORY = 2;
  public static final int CUDA_ERROR_NOT_INITIALIZED = 3;
  public static final int CUDA_ERROR_NO_DEVICE = 100;
  public static final int CUDA_ERROR_INVALID_DEVICE = 101;
  public static final int CUDA_ERROR_INVALID_IMAGE = 200;
  public static final int CUDA_ERROR_INVALID_CONTEXT = 201;
  public static final int CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
  public static final int CUDA_ERROR_INVALID_PTX = 218;
  public static final int CUDA_ERROR_INVALID_HANDLE = 400;
  public static final int CUDA_ERROR_NOT_FOUND = 500;
  public static final int CUDA_ERROR_NOT_READY = 600;
  public static final int CUDA_ERROR_ILLEGAL_ADDRESS = 700;
  public static final int CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;
  public static final int CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712;
  public static final int CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713;
  public static final int CUDA_ERROR_LAUNCH_FAILED = 719;
  public static final int CUDA_ERROR_NOT_SUPPORTED = 801;
  public static final int CUDA_ERROR_UNKNOWN = 999;

  private static final Map<Integer, String> NAMES = Map.ofEntries(
      Map.entry(CUDA_SUCCESS, "CUDA_SUCCESS"),
      Map.entry(CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"),
      Map.entry(CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"),
      Map.entry(CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"),
      Map.entry(CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"),
      Map.entry(CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"),
      Map.entry(CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"),
      Map.entry(CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"),
      Map.entry(CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
      Map.entry(CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"),
      Map.entry(CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"),
      Map.entry(CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"),
      Map.entry(CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"),
      Map.entry(CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"),
      Map.entry(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
      Map.entry(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
      Map.entry(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
      Map.entry(CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"),
      Map.entry(CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED"),
      Map.entry(CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN"));

  private CudaError() {}

  /** The code's name, or {@code CUDA_ERROR_<code>} for one not in the table. */
  public static String nameOf(int code) {
    return NAMES.getOrDefault(code, "CUDA_ERROR_" + code);
  }

  /** A {@link CudaException} for {@code code}, named from the table: what the simulated device throws. */
  public static CudaException exception(String call, int code, String detail) {
    return CudaException.of(call, code, nameOf(code), detail);
  }
}
