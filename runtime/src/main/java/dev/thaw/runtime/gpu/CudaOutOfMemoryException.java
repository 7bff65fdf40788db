package dev.thaw.runtime.gpu;

/** The device, or pinned host memory, is out of memory. The context stays usable. */
public class CudaOutOfMemoryException extends CudaException {

  public CudaOutOfMemoryException(String call, int code, String errorName, String detail) {
    super(call, code, errorName, detail);
  }
}
