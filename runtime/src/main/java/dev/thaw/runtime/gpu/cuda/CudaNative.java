package dev.thaw.runtime.gpu.cuda;

import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import java.nio.charset.StandardCharsets;

/**
 * The CUDA Driver API through JNA direct mapping: CUDA's exported symbol names verbatim, {@code long}/{@code int}
 * only. Pointers and handles are {@code long}; out-parameters are addresses of native scratch memory.
 *
 * <p>Every symbol name, constant and struct offset here is taken from CUDA 13.0's {@code cuda.h}
 * ({@code CUDA_VERSION 13000}), where e.g. {@code cuCtxCreate} is {@code #define}d to {@code cuCtxCreate_v4}.
 * Offsets were checked with {@code offsetof} against that header on x86-64.
 */
final class CudaNative {

  static final String LIBRARY = "libcuda.so.1";

  static {
    Native.register(CudaNative.class, NativeLibrary.getInstance(LIBRARY));
  }

  private CudaNative() {}

  /** Forces the registration above; throws a {@link LinkageError} if the library or a symbol is missing. */
  static void load() {}

  // ---- CUresult ----
  static final int CUDA_SUCCESS = 0;
  static final int CUDA_ERROR_INVALID_VALUE = 1;
  static final int CUDA_ERROR_NOT_READY = 600;

  // ---- CUdevice_attribute ----
  static final int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
  static final int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
  static final int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

  // ---- CUfunction_attribute ----
  static final int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

  // ---- flags ----
  static final int CU_CTX_SCHED_AUTO = 0x00;
  static final int CU_STREAM_NON_BLOCKING = 0x1;
  static final int CU_EVENT_DEFAULT = 0x0;
  static final int CU_EVENT_DISABLE_TIMING = 0x2;
  static final int CU_EVENT_WAIT_DEFAULT = 0x0;
  static final int CU_MEMHOSTALLOC_PORTABLE = 0x01;
  static final int CU_MEMHOSTREGISTER_PORTABLE = 0x01;
  static final int CU_MEMHOSTREGISTER_READ_ONLY = 0x08;

  // ---- virtual memory management enums ----
  static final int CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
  static final int CU_MEM_HANDLE_TYPE_NONE = 0x0;
  static final int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1;
  static final int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
  static final int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0;

  /**
   * {@code CUmemAllocationProp} (32 bytes): {@code int type @0; int requestedHandleTypes @4;
   * CUmemLocation location @8 {int type @8; int id @12}; void *win32HandleMetaData @16;
   * struct allocFlags @24 {uchar compressionType; uchar gpuDirectRDMACapable; ushort usage; uchar reserved[4]}}.
   */
  static final int MEM_ALLOCATION_PROP_SIZE = 32;
  static final int MEM_ALLOCATION_PROP_TYPE = 0;
  static final int MEM_ALLOCATION_PROP_REQUESTED_HANDLE_TYPES = 4;
  static final int MEM_ALLOCATION_PROP_LOCATION_TYPE = 8;
  static final int MEM_ALLOCATION_PROP_LOCATION_ID = 12;
  static final int MEM_ALLOCATION_PROP_WIN32_META = 16;
  static final int MEM_ALLOCATION_PROP_ALLOC_FLAGS = 24;

  /** {@code CUmemAccessDesc} (12 bytes): {@code CUmemLocation location @0 {int type @0; int id @4}; int flags @8}. */
  static final int MEM_ACCESS_DESC_SIZE = 12;
  static final int MEM_ACCESS_DESC_LOCATION_TYPE = 0;
  static final int MEM_ACCESS_DESC_LOCATION_ID = 4;
  static final int MEM_ACCESS_DESC_FLAGS = 8;

  /**
   * {@code CUctxCreateParams} (24 bytes): {@code CUexecAffinityParam *execAffinityParams @0;
   * int numExecAffinityParams @8; CUctxCigParam *cigParams @16}.
   */
  static final int CTX_CREATE_PARAMS_SIZE = 24;

  /** {@code CUuuid}: {@code char bytes[16]}. */
  static final int UUID_SIZE = 16;

  // ---- CUjit_option (each an int; option values are void*-sized) and CUjitInputType ----
  static final int CU_JIT_INFO_LOG_BUFFER = 3;
  static final int CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
  static final int CU_JIT_ERROR_LOG_BUFFER = 5;
  static final int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
  static final int CU_JIT_LOG_VERBOSE = 12;
  static final int CU_JIT_INPUT_PTX = 1;

  // ---- initialization, version, devices ----
  static native int cuInit(int flags);

  static native int cuDriverGetVersion(long driverVersionOut);

  static native int cuDeviceGetCount(long countOut);

  static native int cuDeviceGet(long deviceOut, int ordinal);

  static native int cuDeviceGetName(long name, int len, int dev);

  static native int cuDeviceGetAttribute(long valueOut, int attrib, int dev);

  static native int cuDeviceTotalMem_v2(long bytesOut, int dev);

  static native int cuDeviceGetUuid_v2(long uuidOut, int dev);

  /** {@code cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)}. */
  static native int cuDeviceCanAccessPeer(long canAccessPeerOut, int dev, int peerDev);

  static native int cuGetErrorName(int error, long strOut);

  static native int cuGetErrorString(int error, long strOut);

  // ---- contexts ----
  /** {@code cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)}. */
  static native int cuCtxCreate_v4(long ctxOut, long ctxCreateParams, int flags, int dev);

  static native int cuCtxDestroy_v2(long ctx);

  static native int cuCtxSetCurrent(long ctx);

  static native int cuCtxPushCurrent_v2(long ctx);

  static native int cuCtxPopCurrent_v2(long ctxOut);

  static native int cuDevicePrimaryCtxRetain(long ctxOut, int dev);

  static native int cuCtxSynchronize();

  /** {@code cuMemGetInfo_v2(size_t *free, size_t *total)} of the current context's device. */
  static native int cuMemGetInfo_v2(long freeOut, long totalOut);

  // ---- virtual memory management ----
  static native int cuMemGetAllocationGranularity(long granularityOut, long prop, int option);

  static native int cuMemAddressReserve(long ptrOut, long size, long alignment, long addr, long flags);

  static native int cuMemAddressFree(long ptr, long size);

  static native int cuMemCreate(long handleOut, long size, long prop, long flags);

  static native int cuMemRelease(long handle);

  static native int cuMemMap(long ptr, long size, long offset, long handle, long flags);

  static native int cuMemUnmap(long ptr, long size);

  static native int cuMemSetAccess(long ptr, long size, long desc, long count);

  /** {@code cuMemExportToShareableHandle(void *shareableHandle, handle, handleType, flags)}: an {@code int} fd out. */
  static native int cuMemExportToShareableHandle(long shareableHandleOut, long handle, int handleType, long flags);

  /** {@code cuMemImportFromShareableHandle(handle *out, void *osHandle, handleType)}: the fd itself as {@code osHandle}. */
  static native int cuMemImportFromShareableHandle(long handleOut, long osHandle, int handleType);

  /** {@code cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, handle)}: where imported memory lives. */
  static native int cuMemGetAllocationPropertiesFromHandle(long propOut, long handle);

  // ---- page-locked host memory ----
  static native int cuMemHostAlloc(long ppOut, long bytesize, int flags);

  static native int cuMemFreeHost(long p);

  static native int cuMemHostRegister_v2(long p, long bytesize, int flags);

  static native int cuMemHostUnregister(long p);

  // ---- copies and memset ----

  static native int cuMemcpyHtoDAsync_v2(long dstDevice, long srcHost, long byteCount, long stream);

  static native int cuMemcpyDtoHAsync_v2(long dstHost, long srcDevice, long byteCount, long stream);

  static native int cuMemcpyDtoDAsync_v2(long dstDevice, long srcDevice, long byteCount, long stream);

  /**
   * {@code cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
   * size_t ByteCount, CUstream hStream)}: not {@code #define}d to a versioned symbol in CUDA 13.0's {@code cuda.h}.
   */
  static native int cuMemcpyPeerAsync(long dstDevice, long dstContext, long srcDevice, long srcContext,
      long byteCount, long stream);

  /** {@code uc} is an {@code unsigned char}; only its low 8 bits are read. */
  static native int cuMemsetD8Async(long dstDevice, int uc, long n, long stream);

  static native int cuMemsetD32Async(long dstDevice, int ui, long n, long stream);

  // ---- streams and events ----
  static native int cuStreamCreate(long streamOut, int flags);

  static native int cuStreamDestroy_v2(long stream);

  static native int cuStreamQuery(long stream);

  static native int cuStreamSynchronize(long stream);

  static native int cuStreamWaitEvent(long stream, long event, int flags);

  static native int cuEventCreate(long eventOut, int flags);

  static native int cuEventDestroy_v2(long event);

  static native int cuEventRecord(long event, long stream);

  static native int cuEventQuery(long event);

  static native int cuEventSynchronize(long event);

  /** {@code cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)}. */
  static native int cuEventElapsedTime_v2(long millisecondsOut, long start, long end);

  // ---- JIT linker and modules ----
  static native int cuLinkCreate_v2(int numOptions, long options, long optionValues, long stateOut);

  static native int cuLinkAddData_v2(long state, int type, long data, long size, long name, int numOptions,
      long options, long optionValues);

  static native int cuLinkComplete(long state, long cubinOut, long sizeOut);

  static native int cuLinkDestroy(long state);

  static native int cuModuleLoadData(long moduleOut, long image);

  static native int cuModuleUnload(long module);

  static native int cuModuleGetFunction(long functionOut, long module, long name);

  static native int cuFuncGetParamInfo(long function, long paramIndex, long paramOffsetOut, long paramSizeOut);

  static native int cuFuncSetAttribute(long hfunc, int attrib, int value);

  static native int cuLaunchKernel(long f, int gridDimX, int gridDimY, int gridDimZ, int blockDimX, int blockDimY,
      int blockDimZ, int sharedMemBytes, long stream, long kernelParams, long extra);

  // ---- checking ----

  /** Throws the {@link CudaException} for {@code result} unless it is {@code CUDA_SUCCESS}. */
  static void check(int result, String call) {
    if (result != CUDA_SUCCESS) {
      throw error(call, result);
    }
  }

  /** The exception for a failed call, named by the driver ({@code CudaOutOfMemoryException} for out-of-memory). */
  static CudaException error(String call, int code) {
    return CudaException.of(call, code, errorName(code), errorString(code));
  }

  /** {@code cuGetErrorName}, or Thaw's own table when the driver does not know the code. */
  static String errorName(int code) {
    String name = errorText(code, true);
    return name != null ? name : CudaError.nameOf(code);
  }

  private static String errorString(int code) {
    return errorText(code, false);
  }

  private static String errorText(int code, boolean name) {
    try (Memory out = new Memory(8)) {
      out.setLong(0, 0L);
      long address = Pointer.nativeValue(out);
      int r = name ? cuGetErrorName(code, address) : cuGetErrorString(code, address);
      long str = out.getLong(0);
      return r == CUDA_SUCCESS && str != 0 ? new Pointer(str).getString(0, "UTF-8") : null;
    }
  }

  // ---- scratch memory for out-parameters and small structs ----

  /**
   * A per-thread native slab for out-parameters and small structs. A method uses it between its first write
   * and its last read and calls nothing in between that uses it too (error paths build fresh memory).
   */
  static final class Scratch {
    static final int SIZE = 512;
    private static final ThreadLocal<Scratch> PER_THREAD = ThreadLocal.withInitial(Scratch::new);

    final Memory memory = new Memory(SIZE);
    final long address = Pointer.nativeValue(memory);

    static Scratch get() {
      return PER_THREAD.get();
    }

    /** Zeroes {@code [0, bytes)}, so that struct fields not written are zero as CUDA requires. */
    Scratch clear(int bytes) {
      memory.clear(bytes);
      return this;
    }
  }

  /** A NUL-terminated UTF-8 copy of {@code s} in fresh native memory. */
  static Memory cString(String s) {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    Memory m = new Memory(bytes.length + 1L);
    m.write(0, bytes, 0, bytes.length);
    m.setByte(bytes.length, (byte) 0);
    return m;
  }
}
