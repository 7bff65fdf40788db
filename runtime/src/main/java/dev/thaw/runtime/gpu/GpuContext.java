package dev.thaw.runtime.gpu;

import java.nio.ByteBuffer;

/**
 * A context on one device: the owner of device memory, streams, events, pinned host memory and modules.
 *
 * <h2>Threads</h2>
 * A context may be used from any thread; the CUDA driver makes it current on the calling thread when needed
 * (tracked per thread, so that costs nothing on the hot path). {@link #makeCurrent()} makes it explicit.
 *
 * <h2>Device memory</h2>
 * Device memory is virtual-memory-managed, never {@code cuMemAlloc}: reserve an address range
 * ({@link #reserve}), create physical memory ({@link #createMemory}), map it into the range
 * ({@link VirtualRange#map}) and grant access ({@link Mapping#setAccess}). {@link #allocate} and
 * {@link #allocateAt} do all four at once. Sizes are rounded up to {@link #granularity()}.
 *
 * <h2>Copies</h2>
 * The synchronous copies and memsets here are complete when they return: the bytes are in place for any
 * later work on any stream. They are not ordered after work already queued on streams: synchronize a stream
 * before copying what it writes. They read or fill {@code remaining()} bytes from the host buffer's
 * {@code position()} and leave its position and limit unchanged; a heap buffer is copied through a temporary
 * native buffer, a direct buffer in place. Asynchronous copies need pinned memory and live on
 * {@link GpuStream}.
 *
 * <h2>Errors</h2>
 * An illegal memory access inside a kernel poisons the context, as on a GPU: every later call on it throws
 * a {@link CudaException} with {@code CUDA_ERROR_ILLEGAL_ADDRESS}. Close it and create another.
 */
public interface GpuContext extends AutoCloseable {

  GpuDriver driver();

  DeviceInfo device();

  /** Makes this context current on the calling thread. */
  void makeCurrent();

  /** Blocks until all work in this context is done; reports the first asynchronous error. */
  void synchronize();

  /**
   * True when this context records the exact device bytes every launch reads and writes (the sim device, whose
   * kernels touch memory only through checked views): validation there is exact, and needs no instrumentation.
   * Ask this, never the context's class: a context may be wrapped.
   */
  default boolean recordsAccesses() {
    return false;
  }

  // ---- virtual memory management ----

  /**
   * Free and total memory of this context's device now ({@code cuMemGetInfo_v2}): what every process on the device
   * has left, not this context's share.
   */
  DeviceMemoryInfo memoryInfo();

  /**
   * Bytes of physical memory handles created or imported through this context and not yet closed: this process's
   * own view, unlike {@link #memoryInfo()}. A pooled worker compares it before and after it drops an image, so that
   * memory a function allocated outside its session cannot outlive the image.
   */
  long heldMemoryBytes();

  /** The allocation granularity, in bytes (2 MiB on an H100/H200 and on the sim device). */
  long granularity();

  /**
   * Reserves a device virtual address range, preferring {@code addressHint} when it is free; 0 means anywhere.
   * The driver may return a different address; use {@link #reserveExact} when only the hint will do.
   */
  VirtualRange reserve(long size, long addressHint);

  /**
   * Reserves exactly {@code [address, address + size)}.
   *
   * @throws AddressUnavailableException if the range, or part of it, is taken
   * @throws IllegalArgumentException if {@code address} is not a multiple of the granularity
   */
  VirtualRange reserveExact(long address, long size);

  /**
   * Reserves a range for memory a process keeps beside the images it restores (staging rings, another device's memory
   * mapped here): from the top of the device address space, far from the bottom, where images' recorded addresses
   * lie (a build hands them out first fit from the bottom), so that no image later finds its range taken.
   */
  VirtualRange reserveScratch(long size);

  /** Creates physical device memory of {@code size} bytes (rounded up to the granularity), not yet mapped. */
  PhysicalMemory createMemory(long size);

  /**
   * Creates physical memory like {@link #createMemory} that can also be {@link PhysicalMemory#exportPosixFd
   * exported} as a POSIX file descriptor ({@code CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR}), so that another
   * process can {@link #importMemory import} and map the same bytes.
   *
   * @throws CudaException {@code CUDA_ERROR_NOT_SUPPORTED} where the device cannot export memory
   */
  PhysicalMemory createExportableMemory(long size);

  /**
   * Imports physical memory that this or another process exported ({@code cuMemImportFromShareableHandle}). The
   * descriptor stays the caller's: close it when done; the memory lives while any handle, descriptor or
   * mapping of it does, in any process.
   *
   * @param size the exported memory's size, a multiple of the granularity (a descriptor does not carry it)
   * @throws CudaException if the descriptor is not exported GPU memory of this device
   */
  PhysicalMemory importMemory(int fd, long size);

  /** Reserves, creates, maps and grants read-write access: a buffer anywhere in the address space. */
  default DeviceBuffer allocate(long size) {
    return DeviceBuffer.allocate(this, size, 0L, false);
  }

  /** Like {@link #allocate}, in a {@linkplain #reserveScratch scratch} range. */
  default DeviceBuffer allocateScratch(long size) {
    return DeviceBuffer.allocateScratch(this, size);
  }

  /**
   * Like {@link #allocate}, at exactly {@code address}.
   *
   * @throws AddressUnavailableException if the range is taken
   */
  default DeviceBuffer allocateAt(long address, long size) {
    return DeviceBuffer.allocate(this, size, address, true);
  }

  // ---- host memory ----

  /** Page-locked host memory that the device can copy to and from asynchronously. */
  PinnedBuffer allocatePinned(long size);

  /**
   * Page-locks host memory this process already has mapped ({@code cuMemHostRegister_v2}, portable to every
   * context), e.g. a shared-memory arena, so asynchronous copies read it at full speed. Registration is slow (it
   * pins every page): do it once, off the cold path. Closing the returned buffer
   * unregisters ({@code cuMemHostUnregister}) and leaves the memory mapped; unmapping it before that is the
   * caller's error.
   *
   * @param readOnly the memory is mapped read-only in this process ({@code CU_MEMHOSTREGISTER_READ_ONLY}): the
   *     device only reads it, and a copy into it is refused
   * @throws CudaException {@code CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED} (712) if part of it is registered
   */
  PinnedBuffer registerHost(long address, long size, boolean readOnly);

  // ---- synchronous copies and memset ----

  void copyHostToDevice(long dstDevice, ByteBuffer src);

  void copyDeviceToHost(ByteBuffer dst, long srcDevice);

  void copyDeviceToDevice(long dstDevice, long srcDevice, long bytes);

  void memsetD8(long dstDevice, byte value, long bytes);

  void memsetD32(long dstDevice, int value, long count);

  // ---- streams, events ----

  /** A non-blocking stream: it does not synchronize with other streams unless told to by an event. */
  GpuStream createStream();

  /** An event that records timing. */
  default GpuEvent createEvent() {
    return createEvent(true);
  }

  /** An event; without timing it is cheaper to record and wait on. */
  GpuEvent createEvent(boolean timing);

  // ---- modules ----

  /**
   * JIT-compiles PTX for this device through {@code cuLink*} and loads the result; the cubin is kept and
   * available from {@link GpuModule#cubin()} so it can be stored.
   *
   * @throws PtxCompileException with the JIT error log when the PTX does not compile
   */
  GpuModule loadPtx(String ptx);

  /** Loads a cubin (or fatbin) built for this device's architecture, e.g. one from {@link GpuModule#cubin()}. */
  GpuModule loadCubin(byte[] image);

  /** Destroys the context. Objects created from it become unusable. Idempotent. */
  @Override
  void close();
}
