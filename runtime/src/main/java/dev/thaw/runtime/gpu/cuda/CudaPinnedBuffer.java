package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.ReadOnlyBufferException;

/**
 * Page-locked, portable host memory: from {@code cuMemHostAlloc} (freed on close), or memory of the process
 * registered with {@code cuMemHostRegister_v2} (unregistered on close, never freed).
 */
final class CudaPinnedBuffer extends CudaResource implements PinnedBuffer {

  private final long address;
  private final long size;
  private final boolean registered;
  private final boolean readOnly;

  CudaPinnedBuffer(CudaContext context, long address, long size) {
    this(context, address, size, false, false);
  }

  CudaPinnedBuffer(CudaContext context, long address, long size, boolean registered, boolean readOnly) {
    super(context, String.format("CUDA %s 0x%x (%d bytes)", registered ? "registered host memory" : "pinned buffer",
        address, size));
    this.address = address;
    this.size = size;
    this.registered = registered;
    this.readOnly = readOnly;
  }

  @Override
  public boolean isReadOnly() {
    return readOnly;
  }

  @Override
  public long address() {
    checkOpen();
    return address;
  }

  @Override
  public long size() {
    return size;
  }

  @Override
  public ByteBuffer asByteBuffer() {
    checkOpen();
    if (size > Integer.MAX_VALUE) {
      throw new IllegalStateException(describe() + " is larger than a ByteBuffer can be; use slice()");
    }
    return view(new Pointer(address).getByteBuffer(0, size));
  }

  @Override
  public ByteBuffer slice(long offset, int length) {
    checkOpen();
    checkRange(offset, length);
    return view(new Pointer(address).getByteBuffer(offset, length));
  }

  /**
   * A read-only registration is mapped read-only too: its views must refuse a put with
   * {@link ReadOnlyBufferException}, since a write through them would be a SIGSEGV that kills the JVM.
   */
  private ByteBuffer view(ByteBuffer b) {
    return (readOnly ? b.asReadOnlyBuffer() : b).order(ByteOrder.LITTLE_ENDIAN);
  }

  /** Throws unless {@code [offset, offset + length)} lies inside this buffer. */
  void checkRange(long offset, long length) {
    if (offset < 0 || length < 0 || offset > size || length > size - offset) {
      throw new IllegalArgumentException(String.format("[%d, %d) is outside %s", offset, offset + length,
          describe()));
    }
  }

  /** The address for a native call; the caller has checked the range. */
  long rawAddress() {
    return address;
  }

  @Override
  String describe() {
    return String.format("CUDA %s 0x%x (%d bytes%s)", registered ? "registered host memory" : "pinned buffer", address,
        size, readOnly ? ", read-only" : "");
  }

  @Override
  int rank() {
    return RANK_PINNED;
  }

  @Override
  void free() {
    if (registered) {
      check(CudaNative.cuMemHostUnregister(address), "cuMemHostUnregister");
    } else {
      check(CudaNative.cuMemFreeHost(address), "cuMemFreeHost");
    }
  }
}
