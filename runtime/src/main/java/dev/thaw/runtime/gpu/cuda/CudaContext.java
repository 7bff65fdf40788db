package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.DeviceMemoryInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@code CUcontext} made with {@code cuCtxCreate_v4}, and the owner of everything created from it.
 *
 * <p>Invariants: a thread's {@link #CURRENT} holds the {@link #id} of the context this class last made
 * current on it, so an operation calls {@code cuCtxSetCurrent} only when the thread switches contexts. Ids
 * are never reused, unlike {@code CUcontext} values, which the driver may hand out again after a destroy.
 * Creating a handle and destroying the context exclude each other ({@link #lock}): everything registered
 * is freed before {@code cuCtxDestroy_v2}, and nothing is freed after it.
 */
final class CudaContext extends CudaResource implements GpuContext {

  private static final Logger LOG = LoggerFactory.getLogger(CudaContext.class);
  private static final AtomicLong IDS = new AtomicLong();
  private static final ThreadLocal<long[]> CURRENT = ThreadLocal.withInitial(() -> new long[1]);

  private final CudaDriver driver;
  private final DeviceInfo device;
  /** How many devices the driver saw when this context was made: what another device's ordinal is checked against. */
  private final int deviceCount;
  private final int deviceHandle;
  final long handle;
  private final long id = IDS.incrementAndGet();
  private final Set<CudaResource> owned = ConcurrentHashMap.newKeySet();
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  /** Set, under the write lock, just before {@code cuCtxDestroy_v2}. */
  private boolean destroyed;
  private long granularity;
  private DeviceAddressArena arena;
  /**
   * A private stream for the synchronous copies and memsets: each is queued on it and waited for, because
   * {@code cuMemcpyHtoD} from pageable memory may return before the DMA lands and {@code cuMemset*} is
   * asynchronous to the host, and neither is ordered with Thaw's non-blocking streams.
   */
  private long syncStream;

  private CudaContext(CudaDriver driver, DeviceInfo device, int deviceHandle, long handle) {
    super(null, String.format("CUDA context 0x%x on device %d", handle, device.ordinal()));
    this.driver = driver;
    this.device = device;
    this.deviceCount = driver.devices().size();
    this.deviceHandle = deviceHandle;
    this.handle = handle;
  }

  /**
   * {@code cuCtxCreate_v4} with no create params (NULL); the new context is current on the calling thread.
   * {@code cuda.h} does not say in words that NULL is accepted, so a driver that answers
   * {@code CUDA_ERROR_INVALID_VALUE} is asked again with an all-zero {@code CUctxCreateParams}, which means
   * the same: no execution affinity, no CIG.
   */
  static CudaContext create(CudaDriver driver, DeviceInfo device, int deviceHandle) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8 + CudaNative.CTX_CREATE_PARAMS_SIZE);
    int r = CudaNative.cuCtxCreate_v4(s.address, 0L, CudaNative.CU_CTX_SCHED_AUTO, deviceHandle);
    if (r == CudaNative.CUDA_ERROR_INVALID_VALUE) {
      r = CudaNative.cuCtxCreate_v4(s.address, s.address + 8, CudaNative.CU_CTX_SCHED_AUTO, deviceHandle);
    }
    check(r, "cuCtxCreate_v4");
    CudaContext ctx = new CudaContext(driver, device, deviceHandle, s.memory.getLong(0));
    CURRENT.get()[0] = ctx.id;
    try {
      ctx.granularity = ctx.queryGranularity();
      ctx.arena = CudaDriver.arena(deviceHandle);
      CudaNative.Scratch st = CudaNative.Scratch.get().clear(8);
      check(CudaNative.cuStreamCreate(st.address, CudaNative.CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      ctx.syncStream = st.memory.getLong(0);
    } catch (RuntimeException e) {
      ctx.close();
      throw e;
    }
    return ctx;
  }

  private long queryGranularity() {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(64 + 8);
    writeAllocationProp(s.memory, 0);
    check(CudaNative.cuMemGetAllocationGranularity(s.address + 64, s.address,
        CudaNative.CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
    long g = s.memory.getLong(64);
    if (g <= 0 || Long.bitCount(g) != 1) {
      throw new IllegalStateException("cuMemGetAllocationGranularity returned " + g);
    }
    return g;
  }

  /** A {@code CUmemAllocationProp} for pinned memory on this device, at {@code offset} of zeroed memory. */
  private void writeAllocationProp(Memory m, int offset) {
    writeAllocationProp(m, offset, CudaNative.CU_MEM_HANDLE_TYPE_NONE);
  }

  private void writeAllocationProp(Memory m, int offset, int handleTypes) {
    m.setInt(offset + CudaNative.MEM_ALLOCATION_PROP_TYPE, CudaNative.CU_MEM_ALLOCATION_TYPE_PINNED);
    m.setInt(offset + CudaNative.MEM_ALLOCATION_PROP_REQUESTED_HANDLE_TYPES, handleTypes);
    m.setInt(offset + CudaNative.MEM_ALLOCATION_PROP_LOCATION_TYPE, CudaNative.CU_MEM_LOCATION_TYPE_DEVICE);
    m.setInt(offset + CudaNative.MEM_ALLOCATION_PROP_LOCATION_ID, device.ordinal());
    m.setLong(offset + CudaNative.MEM_ALLOCATION_PROP_WIN32_META, 0L);
    m.setLong(offset + CudaNative.MEM_ALLOCATION_PROP_ALLOC_FLAGS, 0L);
  }

  int deviceCount() {
    return deviceCount;
  }

  /** The {@code CUmemLocation.id} of this device: its ordinal, as {@code cuda.h} says. */
  int locationId() {
    return device.ordinal();
  }

  // ---- current-context tracking ----

  /** Makes this context current on the calling thread unless this class already did. */
  void ensureCurrent() {
    long[] current = CURRENT.get();
    if (current[0] != id) {
      check(CudaNative.cuCtxSetCurrent(handle), "cuCtxSetCurrent");
      current[0] = id;
    }
  }

  @Override
  public void makeCurrent() {
    checkOpen();
    check(CudaNative.cuCtxSetCurrent(handle), "cuCtxSetCurrent");
    CURRENT.get()[0] = id;
  }

  // ---- ownership ----

  /** Runs {@code create} with this context current and registers what it returns; excludes teardown. */
  <T extends CudaResource> T create(Supplier<T> create) {
    lock.readLock().lock();
    try {
      checkOpen();
      ensureCurrent();
      T resource = create.get();
      owned.add(resource);
      return resource;
    } finally {
      lock.readLock().unlock();
    }
  }

  void forget(CudaResource resource) {
    owned.remove(resource);
  }

  /** Frees {@code resource} with this context current, unless the context is already destroyed. */
  void release(CudaResource resource) {
    lock.readLock().lock();
    try {
      if (destroyed) {
        return;
      }
      ensureCurrent();
      resource.free();
    } finally {
      lock.readLock().unlock();
    }
  }

  /** Casts a handle given to this context, checking that it is a CUDA one of this context and open. */
  <T extends CudaResource> T own(Object given, Class<T> type, String what) {
    Objects.requireNonNull(given, what);
    if (!type.isInstance(given)) {
      throw new IllegalArgumentException(what + " " + given + " does not belong to the CUDA driver");
    }
    T t = type.cast(given);
    if (t.context != this) {
      throw new IllegalArgumentException(what + " " + given + " belongs to another context than " + describe());
    }
    t.checkOpen();
    return t;
  }

  // ---- GpuContext ----

  @Override
  public GpuDriver driver() {
    return driver;
  }

  @Override
  public DeviceInfo device() {
    return device;
  }

  @Override
  public void synchronize() {
    checkOpen();
    ensureCurrent();
    check(CudaNative.cuCtxSynchronize(), "cuCtxSynchronize");
  }

  @Override
  public DeviceMemoryInfo memoryInfo() {
    checkOpen();
    ensureCurrent();
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(16);
    check(CudaNative.cuMemGetInfo_v2(s.address, s.address + 8), "cuMemGetInfo_v2");
    return new DeviceMemoryInfo(s.memory.getLong(0), s.memory.getLong(8));
  }

  @Override
  public long granularity() {
    checkOpen();
    return granularity;
  }

  /**
   * A range from the process's arena (see {@link DeviceAddressArena}): at the hint when it is free, else the
   * first free place. A hint outside the arena goes to the driver.
   */
  @Override
  public VirtualRange reserve(long size, long addressHint) {
    long rounded = roundUp(size);
    checkAligned(addressHint, "address hint");
    return create(() -> {
      if (addressHint == 0 || arena.contains(addressHint, rounded)) {
        if (addressHint != 0 && arena.allocateAt(addressHint, rounded)) {
          return new CudaVirtualRange(this, addressHint, rounded, arena);
        }
        long at = arena.allocate(rounded, granularity);
        if (at != 0) {
          return new CudaVirtualRange(this, at, rounded, arena);
        }
      }
      return new CudaVirtualRange(this, reserveRaw(rounded, addressHint), rounded, null);
    });
  }

  /** The highest free place of the arena; the driver's choice when the arena is full. */
  @Override
  public VirtualRange reserveScratch(long size) {
    long rounded = roundUp(size);
    return create(() -> {
      long at = arena.allocateTop(rounded, granularity);
      if (at != 0) {
        return new CudaVirtualRange(this, at, rounded, arena);
      }
      return new CudaVirtualRange(this, reserveRaw(rounded, 0L), rounded, null);
    });
  }

  @Override
  public VirtualRange reserveExact(long address, long size) {
    if (address == 0) {
      throw new IllegalArgumentException("an exact reservation needs an address, not 0");
    }
    checkAligned(address, "address");
    long rounded = roundUp(size);
    return create(() -> {
      if (arena.contains(address, rounded)) {
        if (!arena.allocateAt(address, rounded)) {
          throw new AddressUnavailableException(address, rounded, "part of it is reserved in this process");
        }
        return new CudaVirtualRange(this, address, rounded, arena);
      }
      long got = reserveRaw(rounded, address);
      if (got != address) {
        check(CudaNative.cuMemAddressFree(got, rounded), "cuMemAddressFree");
        throw new AddressUnavailableException(address, rounded,
            String.format("cuMemAddressReserve offered 0x%x instead", got));
      }
      return new CudaVirtualRange(this, got, rounded, null);
    });
  }

  private long reserveRaw(long size, long hint) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuMemAddressReserve(s.address, size, 0L, hint, 0L), "cuMemAddressReserve");
    return s.memory.getLong(0);
  }

  @Override
  public long heldMemoryBytes() {
    long bytes = 0;
    for (Object o : owned) {
      if (o instanceof PhysicalMemory m) {
        bytes += m.size();
      }
    }
    return bytes;
  }

  @Override
  public PhysicalMemory createMemory(long size) {
    long rounded = roundUp(size);
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(64 + 8);
      writeAllocationProp(s.memory, 0);
      check(CudaNative.cuMemCreate(s.address + 64, rounded, s.address, 0L), "cuMemCreate");
      return new CudaPhysicalMemory(this, s.memory.getLong(64), rounded, false, device.ordinal());
    });
  }

  @Override
  public PhysicalMemory createExportableMemory(long size) {
    long rounded = roundUp(size);
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(64 + 8);
      writeAllocationProp(s.memory, 0, CudaNative.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      check(CudaNative.cuMemCreate(s.address + 64, rounded, s.address, 0L), "cuMemCreate");
      return new CudaPhysicalMemory(this, s.memory.getLong(64), rounded, true, device.ordinal());
    });
  }

  @Override
  public PhysicalMemory importMemory(int fd, long size) {
    if (fd < 0) {
      throw new IllegalArgumentException("not a file descriptor: " + fd);
    }
    long rounded = roundUp(size);
    if (rounded != size) {
      throw new IllegalArgumentException("imported memory's size " + size + " is not a multiple of the granularity");
    }
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      check(CudaNative.cuMemImportFromShareableHandle(s.address, fd, CudaNative.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "cuMemImportFromShareableHandle");
      long handle = s.memory.getLong(0);
      int owner;
      try {
        owner = importedDevice(handle);
      } catch (RuntimeException e) {
        CudaNative.cuMemRelease(handle);
        throw e;
      }
      return new CudaPhysicalMemory(this, handle, size, true, owner);
    });
  }

  /** The device imported memory lives on: its {@code CUmemAllocationProp.location.id}. */
  private static int importedDevice(long handle) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(CudaNative.MEM_ALLOCATION_PROP_SIZE);
    check(CudaNative.cuMemGetAllocationPropertiesFromHandle(s.address, handle),
        "cuMemGetAllocationPropertiesFromHandle");
    return s.memory.getInt(CudaNative.MEM_ALLOCATION_PROP_LOCATION_ID);
  }

  @Override
  public PinnedBuffer registerHost(long address, long size, boolean readOnly) {
    if (address == 0 || size <= 0) {
      throw new IllegalArgumentException(String.format("cannot register [0x%x, +%d)", address, size));
    }
    return create(() -> {
      int flags = CudaNative.CU_MEMHOSTREGISTER_PORTABLE | (readOnly ? CudaNative.CU_MEMHOSTREGISTER_READ_ONLY : 0);
      check(CudaNative.cuMemHostRegister_v2(address, size, flags), "cuMemHostRegister_v2");
      return new CudaPinnedBuffer(this, address, size, true, readOnly);
    });
  }

  @Override
  public PinnedBuffer allocatePinned(long size) {
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      // Portable: pinned for every context, so a staging cache can serve all contexts of a pool.
      check(CudaNative.cuMemHostAlloc(s.address, size, CudaNative.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
      return new CudaPinnedBuffer(this, s.memory.getLong(0), size);
    });
  }

  private long roundUp(long size) {
    checkOpen();
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    if (size > Long.MAX_VALUE - granularity) {
      throw new IllegalArgumentException("size is too large: " + size);
    }
    return (size + granularity - 1) & -granularity;
  }

  private void checkAligned(long address, String what) {
    checkOpen();
    if ((address & (granularity - 1)) != 0) {
      throw new IllegalArgumentException(String.format("%s 0x%x is not a multiple of the granularity 0x%x",
          what, address, granularity));
    }
  }

  // ---- synchronous copies ----

  @Override
  public void copyHostToDevice(long dstDevice, ByteBuffer src) {
    checkOpen();
    Objects.requireNonNull(src, "src");
    int n = src.remaining();
    if (n == 0) {
      return;
    }
    ensureCurrent();
    if (src.isDirect()) {
      check(CudaNative.cuMemcpyHtoDAsync_v2(dstDevice, addressOf(src) + src.position(), n, syncStream),
          "cuMemcpyHtoDAsync_v2");
      awaitSyncStream();
      return;
    }
    try (Memory staging = new Memory(n)) {
      staging.getByteBuffer(0, n).put(src.duplicate());
      check(CudaNative.cuMemcpyHtoDAsync_v2(dstDevice, Pointer.nativeValue(staging), n, syncStream),
          "cuMemcpyHtoDAsync_v2");
      awaitSyncStream();
    }
  }

  @Override
  public void copyDeviceToHost(ByteBuffer dst, long srcDevice) {
    checkOpen();
    Objects.requireNonNull(dst, "dst");
    if (dst.isReadOnly()) {
      throw new IllegalArgumentException("cannot copy into a read-only buffer");
    }
    int n = dst.remaining();
    if (n == 0) {
      return;
    }
    ensureCurrent();
    if (dst.isDirect()) {
      check(CudaNative.cuMemcpyDtoHAsync_v2(addressOf(dst) + dst.position(), srcDevice, n, syncStream),
          "cuMemcpyDtoHAsync_v2");
      awaitSyncStream();
      return;
    }
    try (Memory staging = new Memory(n)) {
      check(CudaNative.cuMemcpyDtoHAsync_v2(Pointer.nativeValue(staging), srcDevice, n, syncStream),
          "cuMemcpyDtoHAsync_v2");
      awaitSyncStream();
      dst.duplicate().put(staging.getByteBuffer(0, n));
    }
  }

  private static long addressOf(ByteBuffer direct) {
    return Pointer.nativeValue(Native.getDirectBufferPointer(direct));
  }

  @Override
  public void copyDeviceToDevice(long dstDevice, long srcDevice, long bytes) {
    checkOpen();
    checkCount(bytes, "bytes");
    if (bytes == 0) {
      return;
    }
    ensureCurrent();
    check(CudaNative.cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, bytes, syncStream), "cuMemcpyDtoDAsync_v2");
    awaitSyncStream();
  }

  @Override
  public void memsetD8(long dstDevice, byte value, long bytes) {
    checkOpen();
    checkCount(bytes, "bytes");
    if (bytes == 0) {
      return;
    }
    ensureCurrent();
    check(CudaNative.cuMemsetD8Async(dstDevice, value & 0xff, bytes, syncStream), "cuMemsetD8Async");
    awaitSyncStream();
  }

  @Override
  public void memsetD32(long dstDevice, int value, long count) {
    checkOpen();
    checkCount(count, "count");
    checkWordAligned(dstDevice);
    if (count == 0) {
      return;
    }
    ensureCurrent();
    check(CudaNative.cuMemsetD32Async(dstDevice, value, count, syncStream), "cuMemsetD32Async");
    awaitSyncStream();
  }

  private void awaitSyncStream() {
    check(CudaNative.cuStreamSynchronize(syncStream), "cuStreamSynchronize");
  }

  static void checkCount(long n, String what) {
    if (n < 0) {
      throw new IllegalArgumentException(what + " must not be negative: " + n);
    }
  }

  /** {@code cuMemsetD32} needs a 4-byte-aligned destination. */
  static void checkWordAligned(long dstDevice) {
    if ((dstDevice & 3) != 0) {
      throw new IllegalArgumentException(String.format("device address 0x%x is not 4-byte aligned", dstDevice));
    }
  }

  // ---- streams, events, modules ----

  @Override
  public GpuStream createStream() {
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      check(CudaNative.cuStreamCreate(s.address, CudaNative.CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      return new CudaStream(this, s.memory.getLong(0));
    });
  }

  @Override
  public GpuEvent createEvent(boolean timing) {
    return create(() -> {
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      int flags = timing ? CudaNative.CU_EVENT_DEFAULT : CudaNative.CU_EVENT_DISABLE_TIMING;
      check(CudaNative.cuEventCreate(s.address, flags), "cuEventCreate");
      return new CudaEvent(this, s.memory.getLong(0), timing);
    });
  }

  @Override
  public GpuModule loadPtx(String ptx) {
    Objects.requireNonNull(ptx, "ptx");
    if (ptx.isBlank()) {
      throw new IllegalArgumentException("PTX is empty");
    }
    return create(() -> CudaModule.jit(this, ptx));
  }

  @Override
  public GpuModule loadCubin(byte[] image) {
    Objects.requireNonNull(image, "image");
    if (image.length == 0) {
      throw new IllegalArgumentException("cubin image is empty");
    }
    return create(() -> CudaModule.load(this, image));
  }

  // ---- teardown ----

  @Override
  String describe() {
    return String.format("CUDA context 0x%x on device %d", handle, device.ordinal());
  }

  @Override
  int rank() {
    return Integer.MAX_VALUE;
  }

  @Override
  void free() {
    throw new AssertionError("a context is torn down by dispose()");
  }

  /**
   * Frees what is still open, in {@link CudaResource#rank()} order, then destroys the context. A child that
   * fails to free (after a sticky error, say) is logged and skipped: {@code cuCtxDestroy_v2} still runs.
   */
  @Override
  void dispose() {
    lock.writeLock().lock();
    try {
      try {
        ensureCurrent();
        int r = CudaNative.cuCtxSynchronize();
        if (r != CudaNative.CUDA_SUCCESS) {
          LOG.debug("{}: cuCtxSynchronize before destroy returned {}", describe(), CudaNative.errorName(r));
        }
      } catch (RuntimeException e) {
        LOG.debug("{}: cannot make it current before destroy: {}", describe(), e.getMessage());
      }
      List<CudaResource> children = new ArrayList<>(owned);
      children.sort(Comparator.comparingInt(CudaResource::rank));
      for (CudaResource child : children) {
        try {
          child.close();
        } catch (RuntimeException e) {
          LOG.warn("{}: freeing {} failed while closing the context: {}", describe(), child.describe(),
              e.getMessage());
        }
      }
      owned.clear();
      if (syncStream != 0) {
        int rs = CudaNative.cuStreamDestroy_v2(syncStream);
        if (rs != CudaNative.CUDA_SUCCESS) {
          LOG.debug("{}: destroying the copy stream returned {}", describe(), CudaNative.errorName(rs));
        }
      }
      destroyed = true;
      int r = CudaNative.cuCtxDestroy_v2(handle);
      long[] current = CURRENT.get();
      if (current[0] == id) {
        current[0] = 0;
      }
      check(r, "cuCtxDestroy_v2");
    } finally {
      lock.writeLock().unlock();
    }
  }
}
