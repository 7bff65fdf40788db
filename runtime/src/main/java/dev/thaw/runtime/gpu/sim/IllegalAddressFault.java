package dev.thaw.runtime.gpu.sim;

/**
 * Thrown by {@link DeviceMemory} at an access a GPU would fault on. It ends the launch, which then poisons
 * its context with {@code CUDA_ERROR_ILLEGAL_ADDRESS}; catching it inside a kernel changes nothing, since the
 * view stays faulted. No stack trace: it is a control transfer, and the message says everything.
 */
final class IllegalAddressFault extends RuntimeException {

  IllegalAddressFault(String message) {
    super(message, null, false, false);
  }
}
