package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;

/** A {@code CUevent}, with timing or {@code CU_EVENT_DISABLE_TIMING}. */
final class CudaEvent extends CudaResource implements GpuEvent {

  final long handle;
  private final boolean timing;

  CudaEvent(CudaContext context, long handle, boolean timing) {
    super(context, String.format("CUDA event 0x%x", handle));
    this.handle = handle;
    this.timing = timing;
  }

  @Override
  public void record(GpuStream stream) {
    checkOpen();
    CudaStream s = context.own(stream, CudaStream.class, "stream");
    context.ensureCurrent();
    check(CudaNative.cuEventRecord(handle, s.handle), "cuEventRecord");
  }

  @Override
  public boolean isComplete() {
    checkOpen();
    context.ensureCurrent();
    int r = CudaNative.cuEventQuery(handle);
    if (r == CudaNative.CUDA_ERROR_NOT_READY) {
      return false;
    }
    check(r, "cuEventQuery");
    return true;
  }

  @Override
  public void synchronize() {
    checkOpen();
    context.ensureCurrent();
    check(CudaNative.cuEventSynchronize(handle), "cuEventSynchronize");
  }

  /** {@code cuEventElapsedTime_v2(&ms, start, this)}; the driver reports events without timing or not done. */
  @Override
  public float elapsedMillisSince(GpuEvent start) {
    checkOpen();
    CudaEvent s = context.own(start, CudaEvent.class, "start event");
    context.ensureCurrent();
    CudaNative.Scratch scratch = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuEventElapsedTime_v2(scratch.address, s.handle, handle), "cuEventElapsedTime_v2");
    return scratch.memory.getFloat(0);
  }

  boolean timing() {
    return timing;
  }

  @Override
  String describe() {
    return String.format("CUDA event 0x%x%s", handle, timing ? "" : " (no timing)");
  }

  @Override
  int rank() {
    return RANK_EVENT;
  }

  @Override
  void free() {
    check(CudaNative.cuEventDestroy_v2(handle), "cuEventDestroy_v2");
  }
}
