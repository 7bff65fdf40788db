package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.PhysicalMemory;

/** A {@code CUmemGenericAllocationHandle} from {@code cuMemCreate}: pinned device memory, not yet mapped. */
final class CudaPhysicalMemory extends CudaResource implements PhysicalMemory {

  final long handle;
  private final long size;

  CudaPhysicalMemory(CudaContext context, long handle, long size) {
    super(context, String.format("CUDA physical memory 0x%x (%d bytes)", handle, size));
    this.handle = handle;
    this.size = size;
  }

  @Override
  public long size() {
    return size;
  }

  @Override
  String describe() {
    return String.format("CUDA physical memory 0x%x (%d bytes)", handle, size);
  }

  @Override
  int rank() {
    return RANK_PHYSICAL;
  }

  /** The memory itself stays until every mapping of it is unmapped, as CUDA defines it. */
  @Override
  void free() {
    check(CudaNative.cuMemRelease(handle), "cuMemRelease");
  }
}
