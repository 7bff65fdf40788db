package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.MemoryAccess;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;

/** Physical memory mapped into a {@link CudaVirtualRange} by {@code cuMemMap}; owned by that range. */
final class CudaMapping extends CudaResource implements Mapping {

  private final CudaVirtualRange range;
  private final long address;
  private final long size;
  private volatile MemoryAccess access;
  /** Access granted to devices by ordinal, the mapping's own included. */
  private final Map<Integer, MemoryAccess> granted = new ConcurrentHashMap<>();

  CudaMapping(CudaVirtualRange range, long address, long size) {
    super(range.context, String.format("CUDA mapping [0x%x, 0x%x)", address, address + size));
    this.range = range;
    this.address = address;
    this.size = size;
  }

  @Override
  public long address() {
    return address;
  }

  @Override
  public long size() {
    return size;
  }

  /** {@code cuMemSetAccess} with one {@code CUmemAccessDesc}: this context's device, {@code access}. */
  @Override
  public void setAccess(MemoryAccess access) {
    Objects.requireNonNull(access, "access");
    checkOpen();
    grant(context.locationId(), access);
    this.access = access;
  }

  @Override
  public MemoryAccess access() {
    return access;
  }

  /** {@code cuMemSetAccess} with one {@code CUmemAccessDesc}: the device {@code deviceOrdinal}, {@code access}. */
  @Override
  public void setAccessFor(int deviceOrdinal, MemoryAccess access) {
    Objects.requireNonNull(access, "access");
    checkOpen();
    int devices = context.deviceCount();
    if (deviceOrdinal < 0 || deviceOrdinal >= devices) {
      throw new IllegalArgumentException("no device " + deviceOrdinal + "; " + devices + " visible");
    }
    grant(deviceOrdinal, access);
    if (deviceOrdinal == context.locationId()) {
      this.access = access;
    }
  }

  @Override
  public MemoryAccess accessFor(int deviceOrdinal) {
    return granted.get(deviceOrdinal);
  }

  private void grant(int location, MemoryAccess access) {
    context.ensureCurrent();
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(CudaNative.MEM_ACCESS_DESC_SIZE);
    s.memory.setInt(CudaNative.MEM_ACCESS_DESC_LOCATION_TYPE, CudaNative.CU_MEM_LOCATION_TYPE_DEVICE);
    s.memory.setInt(CudaNative.MEM_ACCESS_DESC_LOCATION_ID, location);
    s.memory.setInt(CudaNative.MEM_ACCESS_DESC_FLAGS, access.cudaFlags());
    check(CudaNative.cuMemSetAccess(address, size, s.address, 1L), "cuMemSetAccess");
    granted.put(location, access);
  }

  @Override
  String describe() {
    return String.format("CUDA mapping [0x%x, 0x%x)", address, address + size);
  }

  @Override
  int rank() {
    return RANK_MAPPING;
  }

  @Override
  void dispose() {
    range.forget(this);
    super.dispose();
  }

  @Override
  void free() {
    check(CudaNative.cuMemUnmap(address, size), "cuMemUnmap");
  }
}
