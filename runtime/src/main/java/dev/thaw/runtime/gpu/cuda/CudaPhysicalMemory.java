package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.PhysicalMemory;

/** A {@code CUmemGenericAllocationHandle} from {@code cuMemCreate}: pinned device memory, not yet mapped. */
final class CudaPhysicalMemory extends CudaResource implements PhysicalMemory {

  final long handle;
  private final long size;
  private final boolean exportable;
  private final int deviceOrdinal;

  CudaPhysicalMemory(CudaContext context, long handle, long size, boolean exportable, int deviceOrdinal) {
    super(context, String.format("CUDA physical memory 0x%x (%d bytes)", handle, size));
    this.handle = handle;
    this.size = size;
    this.exportable = exportable;
    this.deviceOrdinal = deviceOrdinal;
  }

  @Override
  public int deviceOrdinal() {
    return deviceOrdinal;
  }

  @Override
  public boolean isExportable() {
    return exportable;
  }

  @Override
  public int exportPosixFd() {
    checkOpen();
    if (!exportable) {
      throw new IllegalStateException(describe() + " was not created exportable");
    }
    context.ensureCurrent();
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuMemExportToShareableHandle(s.address, handle, CudaNative.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        0L), "cuMemExportToShareableHandle");
    return s.memory.getInt(0);
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
