package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import java.util.Objects;

/** A {@code CU_STREAM_NON_BLOCKING} stream. Host-side arguments are checked before any call is made. */
final class CudaStream extends CudaResource implements GpuStream {

  final long handle;

  CudaStream(CudaContext context, long handle) {
    super(context, String.format("CUDA stream 0x%x", handle));
    this.handle = handle;
  }

  @Override
  public GpuContext context() {
    return context;
  }

  @Override
  public void copyHostToDeviceAsync(long dstDevice, PinnedBuffer src, long srcOffset, long bytes) {
    checkOpen();
    CudaPinnedBuffer pinned = pinned(src, srcOffset, bytes);
    if (bytes == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemcpyHtoDAsync_v2(dstDevice, pinned.rawAddress() + srcOffset, bytes, handle),
        "cuMemcpyHtoDAsync_v2");
  }

  @Override
  public void copyDeviceToHostAsync(PinnedBuffer dst, long dstOffset, long srcDevice, long bytes) {
    checkOpen();
    CudaPinnedBuffer pinned = pinned(dst, dstOffset, bytes);
    if (pinned.isReadOnly()) {
      throw new IllegalArgumentException(pinned.describe() + " is registered read-only: nothing can be copied into it");
    }
    if (bytes == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemcpyDtoHAsync_v2(pinned.rawAddress() + dstOffset, srcDevice, bytes, handle),
        "cuMemcpyDtoHAsync_v2");
  }

  /**
   * Pinned memory from any context of this driver will do: it is allocated portable. It must be open and
   * hold the whole range.
   */
  private static CudaPinnedBuffer pinned(PinnedBuffer buffer, long offset, long bytes) {
    Objects.requireNonNull(buffer, "pinned buffer");
    if (!(buffer instanceof CudaPinnedBuffer)) {
      throw new IllegalArgumentException(buffer + " is not pinned memory of the CUDA driver");
    }
    CudaPinnedBuffer pinned = (CudaPinnedBuffer) buffer;
    pinned.checkOpen();
    pinned.checkRange(offset, bytes);
    return pinned;
  }

  @Override
  public void copyDeviceToDeviceAsync(long dstDevice, long srcDevice, long bytes) {
    checkOpen();
    CudaContext.checkCount(bytes, "bytes");
    if (bytes == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, bytes, handle), "cuMemcpyDtoDAsync_v2");
  }

  /** {@code cuMemcpyPeerAsync}; both contexts must be CUDA contexts of this driver, open. */
  @Override
  public void copyPeerAsync(long dstDevice, GpuContext dstContext, long srcDevice, GpuContext srcContext,
      long bytes) {
    checkOpen();
    CudaContext dst = cudaContext(dstContext, "destination context");
    CudaContext src = cudaContext(srcContext, "source context");
    CudaContext.checkCount(bytes, "bytes");
    if (bytes == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemcpyPeerAsync(dstDevice, dst.handle, srcDevice, src.handle, bytes, handle),
        "cuMemcpyPeerAsync");
  }

  private static CudaContext cudaContext(GpuContext given, String what) {
    Objects.requireNonNull(given, what);
    if (!(given instanceof CudaContext c)) {
      throw new IllegalArgumentException(what + " " + given + " does not belong to the CUDA driver");
    }
    c.checkOpen();
    return c;
  }

  @Override
  public void memsetD8Async(long dstDevice, byte value, long bytes) {
    checkOpen();
    CudaContext.checkCount(bytes, "bytes");
    if (bytes == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemsetD8Async(dstDevice, value & 0xff, bytes, handle), "cuMemsetD8Async");
  }

  @Override
  public void memsetD32Async(long dstDevice, int value, long count) {
    checkOpen();
    CudaContext.checkCount(count, "count");
    CudaContext.checkWordAligned(dstDevice);
    if (count == 0) {
      return;
    }
    context.ensureCurrent();
    check(CudaNative.cuMemsetD32Async(dstDevice, value, count, handle), "cuMemsetD32Async");
  }

  /** The event may belong to another context of this driver: {@code cuStreamWaitEvent} allows that. */
  @Override
  public void waitFor(GpuEvent event) {
    checkOpen();
    Objects.requireNonNull(event, "event");
    if (!(event instanceof CudaEvent)) {
      throw new IllegalArgumentException(event + " is not an event of the CUDA driver");
    }
    CudaEvent e = (CudaEvent) event;
    e.checkOpen();
    context.ensureCurrent();
    check(CudaNative.cuStreamWaitEvent(handle, e.handle, CudaNative.CU_EVENT_WAIT_DEFAULT), "cuStreamWaitEvent");
  }

  @Override
  public boolean isIdle() {
    checkOpen();
    context.ensureCurrent();
    int r = CudaNative.cuStreamQuery(handle);
    if (r == CudaNative.CUDA_ERROR_NOT_READY) {
      return false;
    }
    check(r, "cuStreamQuery");
    return true;
  }

  @Override
  public void synchronize() {
    checkOpen();
    context.ensureCurrent();
    check(CudaNative.cuStreamSynchronize(handle), "cuStreamSynchronize");
  }

  @Override
  String describe() {
    return String.format("CUDA stream 0x%x", handle);
  }

  @Override
  int rank() {
    return RANK_STREAM;
  }

  /** {@code cuStreamDestroy_v2} returns at once; the driver frees the stream when its work is done. */
  @Override
  void free() {
    check(CudaNative.cuStreamDestroy_v2(handle), "cuStreamDestroy_v2");
  }
}
