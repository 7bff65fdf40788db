package dev.thaw.runtime.gpu.sim;

import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * Simulated pinned host memory: zeroed native memory. Queued copies hold a reference, so closing it while a
 * copy is in flight frees it only after that copy (on a GPU that would be undefined; here it must not crash).
 */
final class SimPinnedBuffer implements PinnedBuffer {

  private final SimContext context;
  private final long address;
  private final long size;
  /** Host memory of the process registered, not allocated: unregistered on the last release, never freed. */
  private final boolean registered;
  private final boolean readOnly;
  private int refs = 1;
  private boolean closed;

  SimPinnedBuffer(SimContext context, long address, long size) {
    this(context, address, size, false, false);
  }

  SimPinnedBuffer(SimContext context, long address, long size, boolean registered, boolean readOnly) {
    this.context = context;
    this.address = address;
    this.size = size;
    this.registered = registered;
    this.readOnly = readOnly;
  }

  @Override
  public boolean isReadOnly() {
    return readOnly;
  }

  SimContext context() {
    return context;
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
      throw new IllegalStateException(size + " bytes are more than a ByteBuffer holds; use slice");
    }
    return view(0, (int) size);
  }

  @Override
  public ByteBuffer slice(long offset, int length) {
    checkOpen();
    checkRange(offset, length);
    return view(offset, length);
  }

  /** Read-only registered memory may be mapped read-only: a store through a view would kill the process. */
  private ByteBuffer view(long offset, int length) {
    ByteBuffer b = new Pointer(address).getByteBuffer(offset, length).order(ByteOrder.LITTLE_ENDIAN);
    return readOnly ? b.asReadOnlyBuffer().order(ByteOrder.LITTLE_ENDIAN) : b;
  }

  /** {@code [offset, offset + bytes)} must lie in the buffer. */
  void checkRange(long offset, long bytes) {
    if (offset < 0 || bytes < 0 || offset > size - bytes) {
      throw new IllegalArgumentException("[" + offset + ", " + offset + " + " + bytes
          + ") is outside a pinned buffer of " + size + " bytes");
    }
  }

  synchronized void retain() {
    if (closed) {
      throw new IllegalStateException("pinned buffer is closed");
    }
    refs++;
  }

  void release() {
    boolean free;
    synchronized (this) {
      free = --refs == 0;
    }
    if (free) {
      if (registered) {
        context.driver().unregister(address);
      } else {
        SimNative.free(address);
      }
    }
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("pinned buffer is closed");
    }
  }

  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    release();
    context.forget(this);
  }

  @Override
  public String toString() {
    return "SimPinnedBuffer[" + size + " bytes" + (registered ? ", registered" : "") + (readOnly ? ", read-only" : "")
        + "]";
  }
}
