package dev.thaw.runtime.gpu.sim;

import static dev.thaw.runtime.gpu.sim.SimNative.BYTE_BASE;

import com.sun.jna.Native;
import com.sun.jna.Pointer;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.DeviceMemoryInfo;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuModule;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.Mapping;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.PhysicalMemory;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.PtxCompileException;
import dev.thaw.runtime.gpu.VirtualRange;
import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxModuleInfo;
import dev.thaw.runtime.ptx.PtxSyntaxException;
import dev.thaw.runtime.host.ProcessFds;
import dev.thaw.runtime.host.SharedMemory;
import java.io.IOException;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.Lock;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A context on the simulated device. Beyond {@link GpuContext} it reports what every launch touched:
 * {@link #addLaunchListener}.
 *
 * <p>Synchronous copies and memsets run on the caller's thread; stream work runs on each stream's worker.
 * A fault in a kernel (or in queued work whose device memory was unmapped before it ran) poisons the whole
 * driver, as a sticky error poisons a whole CUDA process (after an illegal address even a context created
 * afterwards cannot run work: {@code docs/design/gpu-driver.md}). From then on device work on any of its contexts —
 * synchronization, copies, memsets, launches, stream and event calls, module loads — throws a
 * {@link CudaException} with that error ({@code CUDA_ERROR_ILLEGAL_ADDRESS}, 700, or
 * {@code CUDA_ERROR_LAUNCH_FAILED}, 719). Address-space bookkeeping (reserve, create, map, set access,
 * unmap, release) still works, as it does on CUDA; so does {@code close()}. Only a new driver (on a GPU,
 * a new process) recovers.
 *
 * <p>A mapping made read-only ({@link Mapping#setAccess}) while any stream of its context has
 * work queued or running poisons the driver too ({@code CUDA_ERROR_ILLEGAL_ADDRESS}): the call itself succeeds, as
 * {@code cuMemSetAccess} does, and the error surfaces at the next synchronization. CUDA's driver neither refuses nor
 * waits for such work, and a kernel reading memory whose access changes under it may fault; the sim device makes
 * that hazard certain, for any work of the context, so that a test catches every protection
 * applied while something runs.
 */
public final class SimContext implements GpuContext {

  private static final Logger LOG = LoggerFactory.getLogger(SimContext.class);
  private static final Pattern SM = Pattern.compile("\\bsm_(\\d+)([af]?)\\b");

  private final SimDriver driver;
  private final DeviceInfo device;
  /** The device's ordinal: which view of the address space this context's work sees. */
  private final int ordinal;
  private final int id;
  private final SimAddressSpace space;
  private final AtomicBoolean closed = new AtomicBoolean();
  private final Set<AutoCloseable> owned = ConcurrentHashMap.newKeySet();
  private final Set<SimStream> streams = ConcurrentHashMap.newKeySet();
  private final AtomicInteger streamCount = new AtomicInteger();
  private final List<Consumer<SimLaunchRecord>> listeners = new CopyOnWriteArrayList<>();

  SimContext(SimDriver driver, int id, DeviceInfo device) {
    this.driver = driver;
    this.id = id;
    this.device = device;
    this.ordinal = device.ordinal();
    this.space = driver.space();
  }

  // ---- launch records ----

  /**
   * Calls {@code listener} after every launch on this context that ran, on the stream's worker thread, in
   * stream order: with the kernel, its argument bytes and the exact device ranges it read and wrote, and
   * its fault if it had one. A listener must be quick and must not wait on this context's streams; what it
   * throws is logged and ignored. Launches skipped because the context was already poisoned are not reported.
   */
  public void addLaunchListener(Consumer<SimLaunchRecord> listener) {
    listeners.add(Objects.requireNonNull(listener));
  }

  public void removeLaunchListener(Consumer<SimLaunchRecord> listener) {
    listeners.remove(listener);
  }

  /** The error that poisoned this context's driver, if one did. Never throws. */
  public Optional<CudaException> poisonedBy() {
    return Optional.ofNullable(driver.poison());
  }

  // ---- GpuContext ----

  @Override
  public SimDriver driver() {
    return driver;
  }

  @Override
  public DeviceInfo device() {
    return device;
  }

  @Override
  public void makeCurrent() {
    checkUsable("cuCtxSetCurrent");
  }

  @Override
  public boolean recordsAccesses() {
    return true;
  }

  @Override
  public void synchronize() {
    checkUsable("cuCtxSynchronize");
    for (SimStream s : streams) {
      s.awaitSubmitted();
    }
    checkUsable("cuCtxSynchronize");
  }

  @Override
  public DeviceMemoryInfo memoryInfo() {
    checkUsable("cuMemGetInfo_v2");
    long total = driver.options().memoryBytes();
    return new DeviceMemoryInfo(Math.max(0, total - driver.memoryInUse(ordinal)), total);
  }

  @Override
  public long granularity() {
    checkOpen();
    return SimAddressSpace.GRANULARITY;
  }

  @Override
  public VirtualRange reserve(long size, long addressHint) {
    checkOpen();
    return own(space.reserve(this, size, addressHint, false));
  }

  @Override
  public VirtualRange reserveScratch(long size) {
    checkOpen();
    return own(space.reserveTop(this, size));
  }

  @Override
  public VirtualRange reserveExact(long address, long size) {
    checkOpen();
    return own(space.reserve(this, size, address, true));
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
    checkOpen();
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    long rounded = SimAddressSpace.roundUp(size);
    long host = driver.allocate(ordinal, rounded);
    return own(new SimPhysicalMemory(this, rounded, host));
  }

  @Override
  public PhysicalMemory createExportableMemory(long size) {
    checkOpen();
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    long rounded = SimAddressSpace.roundUp(size);
    driver.count("cuMemCreate", ordinal, rounded);
    try {
      SharedMemory shared = SharedMemory.anonymous(SimPhysicalMemory.MEMFD_PREFIX + ordinal, rounded);
      return own(new SimPhysicalMemory(this, ordinal, rounded, shared.address(), shared, rounded));
    } catch (IOException e) {
      driver.uncount(ordinal, rounded);
      throw CudaError.exception("cuMemCreate", CudaError.CUDA_ERROR_OUT_OF_MEMORY, e.getMessage());
    }
  }

  @Override
  public PhysicalMemory importMemory(int fd, long size) {
    String call = "cuMemImportFromShareableHandle";
    checkOpen();
    if (size <= 0 || size % SimAddressSpace.GRANULARITY != 0) {
      throw new IllegalArgumentException("imported memory's size " + size + " is not a positive multiple of the "
          + "granularity");
    }
    int own;
    try {
      own = ProcessFds.dup(fd);
    } catch (IOException e) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, e.getMessage());
    }
    try {
      int owner = SimPhysicalMemory.exporterDevice(own, ordinal);
      SharedMemory shared = SharedMemory.fromFd(own, size, false);
      return own(new SimPhysicalMemory(this, owner, size, shared.address(), shared, 0));
    } catch (IOException | RuntimeException e) {
      ProcessFds.close(own);
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, "not exported device memory of " + size
          + " bytes: " + e.getMessage());
    }
  }

  @Override
  public PinnedBuffer registerHost(long address, long size, boolean readOnly) {
    String call = "cuMemHostRegister_v2";
    checkUsable(call);
    if (address == 0 || size <= 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, String.format(
          "cannot register [0x%x, +%d)", address, size));
    }
    if (!driver.register(address, size)) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, String.format(
          "[0x%x, +%d) overlaps registered memory", address, size));
    }
    return own(new SimPinnedBuffer(this, address, size, true, readOnly));
  }

  @Override
  public PinnedBuffer allocatePinned(long size) {
    checkUsable("cuMemHostAlloc");
    if (size <= 0) {
      throw new IllegalArgumentException("size must be positive: " + size);
    }
    long host = SimNative.allocateZeroed(size);
    if (host == 0) {
      throw CudaError.exception("cuMemHostAlloc", CudaError.CUDA_ERROR_OUT_OF_MEMORY,
          "the host could not provide " + size + " bytes");
    }
    return own(new SimPinnedBuffer(this, host, size));
  }

  // ---- synchronous copies ----

  @Override
  public void copyHostToDevice(long dstDevice, ByteBuffer src) {
    String call = "cuMemcpyHtoD_v2";
    checkUsable(call);
    int n = src.remaining();
    if (n == 0) {
      return;
    }
    Object base;
    long offset;
    if (src.isDirect()) {
      base = null;
      offset = directAddress(src) + src.position();
    } else if (src.hasArray()) {
      base = src.array();
      offset = BYTE_BASE + src.arrayOffset() + src.position();
    } else {
      byte[] tmp = new byte[n];
      src.duplicate().get(tmp);
      base = tmp;
      offset = BYTE_BASE;
    }
    long t0 = System.nanoTime();
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] segs = space.segments(ordinal);
      requireRange(call, segs, dstDevice, n, true);
      SimAddressSpace.write(segs, dstDevice, base, offset, n);
    } finally {
      read.unlock();
      Reference.reachabilityFence(src);
    }
    driver.modelCopy(n, t0);
  }

  @Override
  public void copyDeviceToHost(ByteBuffer dst, long srcDevice) {
    String call = "cuMemcpyDtoH_v2";
    checkUsable(call);
    if (dst.isReadOnly()) {
      throw new ReadOnlyBufferException();
    }
    int n = dst.remaining();
    if (n == 0) {
      return;
    }
    Object base;
    long offset;
    byte[] tmp = null;
    if (dst.isDirect()) {
      base = null;
      offset = directAddress(dst) + dst.position();
    } else if (dst.hasArray()) {
      base = dst.array();
      offset = BYTE_BASE + dst.arrayOffset() + dst.position();
    } else {
      tmp = new byte[n];
      base = tmp;
      offset = BYTE_BASE;
    }
    long t0 = System.nanoTime();
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] segs = space.segments(ordinal);
      requireRange(call, segs, srcDevice, n, false);
      SimAddressSpace.read(segs, srcDevice, base, offset, n);
    } finally {
      read.unlock();
      Reference.reachabilityFence(dst);
    }
    if (tmp != null) {
      dst.duplicate().put(tmp);
    }
    driver.modelCopy(n, t0);
  }

  @Override
  public void copyDeviceToDevice(long dstDevice, long srcDevice, long bytes) {
    String call = "cuMemcpyDtoD_v2";
    checkUsable(call);
    if (bytes < 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, "negative size " + bytes);
    }
    if (bytes == 0) {
      return;
    }
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] segs = space.segments(ordinal);
      requireRange(call, segs, srcDevice, bytes, false);
      requireRange(call, segs, dstDevice, bytes, true);
      SimAddressSpace.copy(segs, dstDevice, srcDevice, bytes);
    } finally {
      read.unlock();
    }
  }

  @Override
  public void memsetD8(long dstDevice, byte value, long bytes) {
    String call = "cuMemsetD8_v2";
    checkUsable(call);
    if (bytes == 0) {
      return;
    }
    syncFill(call, dstDevice, bytes, segs -> SimAddressSpace.fill8(segs, dstDevice, value, bytes));
  }

  @Override
  public void memsetD32(long dstDevice, int value, long count) {
    String call = "cuMemsetD32_v2";
    checkUsable(call);
    long bytes = memset32Bytes(call, dstDevice, count);
    if (bytes == 0) {
      return;
    }
    syncFill(call, dstDevice, bytes, segs -> SimAddressSpace.fill32(segs, dstDevice, value, count));
  }

  private void syncFill(String call, long dst, long bytes, Consumer<SimAddressSpace.Segment[]> fill) {
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] segs = space.segments(ordinal);
      requireRange(call, segs, dst, bytes, true);
      fill.accept(segs);
    } finally {
      read.unlock();
    }
  }

  static long memset32Bytes(String call, long dst, long count) {
    if (count < 0 || count > Long.MAX_VALUE / 4) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, "bad count " + count);
    }
    if ((dst & 3) != 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE,
          String.format("0x%x is not 4-byte aligned", dst));
    }
    return count * 4;
  }

  private static long directAddress(ByteBuffer b) {
    Pointer p = Native.getDirectBufferPointer(b);
    if (p == null) {
      throw new IllegalArgumentException("direct buffer without an address");
    }
    return Pointer.nativeValue(p);
  }

  private static void requireRange(String call, SimAddressSpace.Segment[] segs, long address, long bytes,
      boolean write) {
    String why = SimAddressSpace.checkAccess(segs, address, bytes, write);
    if (why != null) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_VALUE, String.format(
          "device range [0x%x, +%d) is not usable: %s", address, bytes, why));
    }
  }

  /** At enqueue: the device range must be mapped, with write access for a destination. */
  void checkDeviceRange(String call, long address, long bytes, boolean write) {
    requireRange(call, space.segments(ordinal), address, bytes, write);
  }

  // ---- streams, events ----

  @Override
  public GpuStream createStream() {
    checkUsable("cuStreamCreate");
    SimStream s = new SimStream(this, "thaw-sim-stream-" + id + "-" + streamCount.incrementAndGet());
    streams.add(s);
    own(s);
    s.start();
    if (closed.get()) {
      // Lost a race with close(): do not leave a worker behind.
      s.abort();
      s.join();
      throw new IllegalStateException("context is closed");
    }
    return s;
  }

  @Override
  public GpuEvent createEvent(boolean timing) {
    checkUsable("cuEventCreate");
    return own(new SimEvent(this, timing));
  }

  // ---- modules ----

  @Override
  public GpuModule loadPtx(String ptx) {
    String call = "cuLinkAddData";
    checkUsable(call);
    PtxModuleInfo info;
    try {
      info = PtxEntries.parse(ptx);
    } catch (PtxSyntaxException e) {
      throw new PtxCompileException(call, CudaError.CUDA_ERROR_INVALID_PTX, CudaError.nameOf(CudaError.CUDA_ERROR_INVALID_PTX),
          e.getMessage());
    }
    String arch = device().smArch();
    String problem = targetProblem(info.target());
    if (problem != null) {
      throw new PtxCompileException(call, CudaError.CUDA_ERROR_INVALID_PTX,
          CudaError.nameOf(CudaError.CUDA_ERROR_INVALID_PTX), "ptxas fatal   : " + problem);
    }
    return own(new SimModule(this, ptx, info, SimModule.cubinOf(arch, ptx), false));
  }

  /** Why this device cannot run code for {@code target}, or null. */
  private String targetProblem(String target) {
    Matcher m = SM.matcher(target);
    if (!m.find()) {
      return null;
    }
    int wanted = Integer.parseInt(m.group(1));
    DeviceInfo d = device();
    int have = d.computeCapabilityMajor() * 10 + d.computeCapabilityMinor();
    if (wanted > have) {
      return "SM version specified by .target (sm_" + wanted + m.group(2) + ") is higher than this device's ("
          + d.smArch() + ")";
    }
    if (!m.group(2).isEmpty() && wanted != have) {
      return ".target sm_" + wanted + m.group(2) + " is specific to that architecture; this device is " + d.smArch();
    }
    return null;
  }

  @Override
  public GpuModule loadCubin(byte[] image) {
    String call = "cuModuleLoadData";
    checkUsable(call);
    byte[] magic = SimModule.MAGIC;
    if (image == null || image.length < magic.length
        || !Arrays.equals(image, 0, magic.length, magic, 0, magic.length)) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_IMAGE, "not a simulated-device image (no "
          + new String(magic, StandardCharsets.US_ASCII) + " header)");
    }
    int nl = -1;
    for (int i = magic.length; i < image.length && i < magic.length + 64; i++) {
      if (image[i] == '\n') {
        nl = i;
        break;
      }
    }
    if (nl < 0) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_IMAGE, "no architecture line");
    }
    String arch = new String(image, magic.length, nl - magic.length, StandardCharsets.US_ASCII);
    if (!arch.equals(device().smArch())) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_NO_BINARY_FOR_GPU, "the image is for " + arch
          + ", this device is " + device().smArch());
    }
    String ptx;
    try {
      ptx = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT)
          .decode(ByteBuffer.wrap(image, nl + 1, image.length - nl - 1)).toString();
    } catch (CharacterCodingException e) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_IMAGE, "the embedded PTX is not UTF-8");
    }
    PtxModuleInfo info;
    try {
      info = PtxEntries.parse(ptx);
    } catch (PtxSyntaxException e) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_IMAGE, "the embedded PTX is damaged: "
          + e.getMessage());
    }
    return own(new SimModule(this, ptx, info, image.clone(), true));
  }

  // ---- work run on stream workers ----

  void runLaunch(String name, SimKernel impl, Dim3 grid, Dim3 block, int sharedMemBytes, ParamLayout params,
      byte[] args) {
    if (driver.poison() != null) {
      return;
    }
    DeviceMemory memory;
    String fault;
    Throwable failure = null;
    Lock read = space.readLock();
    read.lock();
    try {
      memory = new DeviceMemory(space.segments(ordinal));
      try {
        impl.launch(new SimLaunch(name, grid, block, sharedMemBytes, params, args, memory));
      } catch (IllegalAddressFault e) {
        // Recorded in the view.
      } catch (Throwable t) {
        failure = t;
      }
      fault = memory.end();
    } finally {
      read.unlock();
    }
    CudaException error = null;
    if (fault != null) {
      error = CudaError.exception("cuLaunchKernel", CudaError.CUDA_ERROR_ILLEGAL_ADDRESS,
          "kernel " + name + ": " + fault);
    } else if (failure != null) {
      error = CudaError.exception("cuLaunchKernel", CudaError.CUDA_ERROR_LAUNCH_FAILED,
          "kernel " + name + " threw " + failure);
      error.initCause(failure);
    }
    if (!listeners.isEmpty()) {
      SimLaunchRecord record = new SimLaunchRecord(name, params, args, grid, block, memory.reads(), memory.writes(),
          error);
      for (Consumer<SimLaunchRecord> l : listeners) {
        try {
          l.accept(record);
        } catch (RuntimeException e) {
          LOG.warn("A launch listener failed on {}", record, e);
        }
      }
    }
    // After the listeners: whoever sees the error at a synchronize can also see the launch's record.
    if (error != null) {
      poison(error);
    }
  }

  void runToDevice(String call, long dst, long hostAddress, long bytes) {
    long t0 = System.nanoTime();
    if (deviceWork(call, dst, bytes, true, segs -> SimAddressSpace.write(segs, dst, null, hostAddress, bytes))) {
      driver.modelCopy(bytes, t0);
    }
  }

  void runToHost(String call, long hostAddress, long src, long bytes) {
    long t0 = System.nanoTime();
    if (deviceWork(call, src, bytes, false, segs -> SimAddressSpace.read(segs, src, null, hostAddress, bytes))) {
      driver.modelCopy(bytes, t0);
    }
  }

  void runDeviceToDevice(String call, long dst, long src, long bytes) {
    long t0 = System.nanoTime();
    boolean[] acrossDevices = new boolean[1];
    boolean ran = deviceWork(call, src, bytes, false, segs -> {
      String why = SimAddressSpace.checkAccess(segs, dst, bytes, true);
      if (why != null) {
        throw new IllegalAddressFault(why);
      }
      acrossDevices[0] = SimAddressSpace.find(segs, src).location != SimAddressSpace.find(segs, dst).location;
      SimAddressSpace.copy(segs, dst, src, bytes);
    });
    if (ran && acrossDevices[0]) {
      driver.modelPeerCopy(bytes, t0);
    }
  }

  /**
   * {@code cuMemcpyPeerAsync}: the source as {@code srcContext}'s device sees it, the destination as {@code
   * dstContext}'s does; neither device needs access to the other's memory (the driver stages through the host where
   * the devices are not peers, which the model does not slow down).
   */
  void runPeer(String call, long dst, SimContext dstContext, long src, SimContext srcContext, long bytes) {
    long t0 = System.nanoTime();
    if (driver.poison() != null) {
      return;
    }
    String why;
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] from = space.segments(srcContext.ordinal);
      SimAddressSpace.Segment[] to = space.segments(dstContext.ordinal);
      why = SimAddressSpace.checkAccess(from, src, bytes, false);
      if (why == null) {
        why = SimAddressSpace.checkAccess(to, dst, bytes, true);
      }
      if (why == null) {
        // Host addresses do not depend on the view: one view with both ranges readable copies them.
        SimAddressSpace.copyBetween(from, src, to, dst, bytes);
      }
    } finally {
      read.unlock();
    }
    if (why != null) {
      poison(CudaError.exception(call, CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, "queued work found its device memory "
          + "gone: " + why));
      return;
    }
    if (srcContext.ordinal != dstContext.ordinal) {
      driver.modelPeerCopy(bytes, t0);
    }
  }

  /** At enqueue, for {@code cuMemcpyPeerAsync}: the range as this context's device sees it. */
  void checkOwnRange(String call, long address, long bytes, boolean write) {
    requireRange(call, space.segments(ordinal), address, bytes, write);
  }

  void runMemset(String call, long dst, long bytes, Consumer<SimAddressSpace.Segment[]> fill) {
    deviceWork(call, dst, bytes, true, fill);
  }

  /**
   * Runs queued work on device memory unless the context is poisoned. A range unmapped since it was queued
   * is an illegal address, which poisons the context. True when the work ran.
   */
  private boolean deviceWork(String call, long address, long bytes, boolean write,
      Consumer<SimAddressSpace.Segment[]> work) {
    if (driver.poison() != null) {
      return false;
    }
    String why;
    Lock read = space.readLock();
    read.lock();
    try {
      SimAddressSpace.Segment[] segs = space.segments(ordinal);
      why = SimAddressSpace.checkAccess(segs, address, bytes, write);
      if (why == null) {
        try {
          work.accept(segs);
          return true;
        } catch (IllegalAddressFault f) {
          why = f.getMessage();
        }
      }
    } finally {
      read.unlock();
    }
    poison(CudaError.exception(call, CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, "queued work found its device memory "
        + "gone: " + why));
    return false;
  }

  // ---- state ----

  /** True while some stream of this context has work queued or running. */
  boolean workInFlight() {
    for (SimStream s : streams) {
      if (s.busy()) {
        return true;
      }
    }
    return false;
  }

  void poison(CudaException error) {
    if (driver.poison(error)) {
      LOG.warn("Simulated device poisoned by context {}: {}", id, error.getMessage());
    }
  }

  /** Throws if the context is closed; what address-space bookkeeping checks. */
  void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("context is closed");
    }
  }

  /** Throws if the context is closed or its driver poisoned; what device work checks. */
  void checkUsable(String call) {
    checkOpen();
    CudaException p = driver.poison();
    if (p != null) {
      throw CudaError.exception(call, p.code(), "the device is unusable after an earlier error: " + p.getMessage());
    }
  }

  private <T extends AutoCloseable> T own(T object) {
    owned.add(object);
    return object;
  }

  void forget(AutoCloseable object) {
    owned.remove(object);
  }

  void streamEnded(SimStream stream) {
    streams.remove(stream);
    owned.remove(stream);
  }

  /** The stream as one of this context's, open and usable. */
  SimStream ownStream(GpuStream stream, String call) {
    if (!(stream instanceof SimStream s)) {
      throw new IllegalArgumentException("not a simulated-device stream: " + stream);
    }
    s.checkOpen();
    if (s.context() != this) {
      throw CudaError.exception(call, CudaError.CUDA_ERROR_INVALID_HANDLE, "the stream belongs to another context");
    }
    checkUsable(call);
    return s;
  }

  SimEvent driverEvent(GpuEvent event) {
    if (!(event instanceof SimEvent e) || e.context().driver != driver) {
      throw new IllegalArgumentException("not an event of this simulated device: " + event);
    }
    return e;
  }

  SimPinnedBuffer pinned(PinnedBuffer buffer) {
    if (!(buffer instanceof SimPinnedBuffer p) || p.context().driver != driver) {
      throw new IllegalArgumentException("not pinned memory of this simulated device: " + buffer);
    }
    return p;
  }

  /** The worker threads of this context's streams that are still running. */
  List<Thread> workerThreads() {
    List<Thread> out = new ArrayList<>();
    for (SimStream s : streams) {
      out.add(s.worker());
    }
    return out;
  }

  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    List<SimStream> workers = new ArrayList<>(streams);
    for (SimStream s : workers) {
      s.abort();
    }
    for (SimStream s : workers) {
      s.join();
    }
    // Ranges before physical memory: unmapping is what lets memory mapped elsewhere be freed.
    List<AutoCloseable> left = new ArrayList<>(owned);
    left.sort((a, b) -> Integer.compare(closeOrder(a), closeOrder(b)));
    for (AutoCloseable o : left) {
      try {
        o.close();
      } catch (Exception e) {
        LOG.warn("Closing {} with its context failed", o, e);
      }
    }
    owned.clear();
    listeners.clear();
    driver.contextClosed(this);
  }

  private static int closeOrder(AutoCloseable o) {
    if (o instanceof SimStream || o instanceof SimEvent || o instanceof SimModule) {
      return 0;
    }
    if (o instanceof SimVirtualRange) {
      return 1;
    }
    return 2;
  }

  @Override
  public String toString() {
    return "SimContext[" + id + (closed.get() ? ", closed" : "") + "]";
  }
}
