package dev.thaw.runtime.gpu.sim;

import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * The simulated device: a {@link GpuDriver} for machines without a GPU, with CUDA's semantics for everything
 * the SPI offers and the same error codes. Nothing it measures is GPU performance.
 *
 * <ul>
 *   <li>One device (ordinal 0), or {@link SimOptions#deviceCount()}, described by {@link SimOptions}, with 132 SMs
 *       unless {@link SimOptions#multiprocessorCount()} says otherwise,
 *       a fixed UUID per ordinal ({@link #DEVICE_UUID} for 0), and
 *       {@link #driverVersion()} 13000 (the CUDA version it mimics).
 *   <li>Device memory is host memory, counted per device against {@link SimOptions#memoryBytes()}; asking for more
 *       is {@code CUDA_ERROR_OUT_OF_MEMORY} and the context stays usable. The virtual address space (2 MiB
 *       granularity) starts at {@code 0x7f0000000000} and is handed out first fit, so every driver opened
 *       with the same calls hands out the same addresses: a second process gets the address it asks for.
 *       All contexts of one driver share that space, as the contexts of a process do. A device reaches another's
 *       memory only through a mapping that granted it access, and only when the devices are peers
 *       ({@link SimOptions#peerAccess()}).
 *   <li>Kernels are Java: a {@link SimKernel} per PTX {@code .entry} name, discovered once when the driver
 *       opens. They see device memory through a checked, recording {@link DeviceMemory}; an illegal access
 *       poisons the whole driver with {@code CUDA_ERROR_ILLEGAL_ADDRESS}, as a sticky error poisons a CUDA process.
 *   <li>Streams are worker threads; with {@link SimOptions#copyGBps()} set, host↔device copies take the
 *       time that bandwidth implies, and with {@link SimOptions#peerGBps()} copies between two devices' memory
 *       (simulated time, not a GPU measurement).
 * </ul>
 */
public final class SimDriver implements GpuDriver {

  /** The CUDA version the simulated device reports. */
  public static final int DRIVER_VERSION = 13000;
  public static final String DEVICE_UUID = "GPU-5a1e0000-0000-4000-8000-000000000000";

  private final SimOptions options;
  private final List<DeviceInfo> devices;
  private final SimAddressSpace space;
  private final Map<String, SimKernel> kernels = new ConcurrentHashMap<>();
  /** By device ordinal. */
  private final AtomicLong[] memoryInUse;
  private final AtomicInteger contextIds = new AtomicInteger();
  private final Set<SimContext> contexts = ConcurrentHashMap.newKeySet();
  /** The sticky error, once a launch faulted: like a CUDA process, the whole simulated device is then unusable. */
  private final AtomicReference<CudaException> poison =
      new AtomicReference<>();
  private volatile boolean closed;

  private SimDriver(SimOptions options) {
    this.options = options;
    List<DeviceInfo> list = new ArrayList<>();
    for (int i = 0; i < options.deviceCount(); i++) {
      list.add(new DeviceInfo(i, options.deviceName(), options.computeCapabilityMajor(),
          options.computeCapabilityMinor(), options.memoryBytes(),
          String.format("GPU-5a1e0000-%04x-4000-8000-000000000000", i), options.multiprocessorCount()));
    }
    this.devices = List.copyOf(list);
    this.space = new SimAddressSpace(devices.size());
    this.memoryInUse = new AtomicLong[devices.size()];
    for (int i = 0; i < memoryInUse.length; i++) {
      memoryInUse[i] = new AtomicLong();
    }
  }

  /**
   * Opens a simulated device and registers the {@link SimKernel}s that {@link ServiceLoader} finds through the
   * thread's context class loader (or this class's).
   *
   * @throws IllegalStateException if two kernels claim one entry name
   * @throws UnsupportedOperationException on a big-endian host, whose memory cannot stand in for a GPU's
   */
  public static SimDriver open(SimOptions options) {
    if (ByteOrder.nativeOrder() != ByteOrder.LITTLE_ENDIAN) {
      throw new UnsupportedOperationException("the simulated device needs a little-endian host");
    }
    SimDriver driver = new SimDriver(options);
    ClassLoader loader = Thread.currentThread().getContextClassLoader();
    if (loader == null) {
      loader = SimKernel.class.getClassLoader();
    }
    for (SimKernel k : ServiceLoader.load(SimKernel.class, loader)) {
      driver.registerKernel(k);
    }
    return driver;
  }

  /**
   * Registers a Java kernel for its {@link SimKernel#entry() entry} name, for modules loaded from now on.
   *
   * @throws IllegalStateException if another kernel has that name
   */
  public void registerKernel(SimKernel kernel) {
    String entry = kernel.entry();
    SimKernel before = kernels.putIfAbsent(entry, kernel);
    if (before != null && before != kernel) {
      throw new IllegalStateException("two simulated kernels for .entry " + entry + ": "
          + before.getClass().getName() + " and " + kernel.getClass().getName());
    }
  }

  /** The entry names that have a Java kernel. */
  public Set<String> registeredKernels() {
    return new TreeSet<>(kernels.keySet());
  }

  public SimOptions options() {
    return options;
  }

  /** Device memory created and not yet freed, in bytes, over all contexts and devices. */
  public long memoryInUse() {
    long sum = 0;
    for (AtomicLong m : memoryInUse) {
      sum += m.get();
    }
    return sum;
  }

  /** Device memory of device {@code ordinal} created and not yet freed, in bytes. */
  public long memoryInUse(int ordinal) {
    return memoryInUse[ordinal].get();
  }

  @Override
  public boolean canAccessPeer(int device, int peerDevice) {
    GpuDriver.checkPeerOrdinals(this, device, peerDevice);
    return options.peerAccess();
  }

  @Override
  public String name() {
    return "sim";
  }

  @Override
  public boolean isSimulated() {
    return true;
  }

  @Override
  public int driverVersion() {
    return DRIVER_VERSION;
  }

  @Override
  public List<DeviceInfo> devices() {
    return devices;
  }

  @Override
  public GpuContext createContext(int deviceOrdinal) {
    checkOpen();
    if (deviceOrdinal < 0 || deviceOrdinal >= devices.size()) {
      throw new IllegalArgumentException("no device " + deviceOrdinal + "; the simulated devices are 0 to "
          + (devices.size() - 1) + " (THAW_SIM_DEVICES)");
    }
    SimContext context = new SimContext(this, contextIds.incrementAndGet(), devices.get(deviceOrdinal));
    contexts.add(context);
    return context;
  }

  void contextClosed(SimContext context) {
    contexts.remove(context);
  }

  /** The error that poisoned this simulated device, or null. */
  CudaException poison() {
    return poison.get();
  }

  /** Poisons the device with {@code error} unless it already is; true if this call did. */
  boolean poison(CudaException error) {
    return poison.compareAndSet(null, error);
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("driver is closed");
    }
  }

  @Override
  public void close() {
    closed = true;
  }

  // ---- for contexts ----

  SimAddressSpace space() {
    return space;
  }

  SimKernel kernel(String entry) {
    return kernels.get(entry);
  }

  /** Zeroed host memory standing in for {@code bytes} of device {@code device}'s memory. */
  long allocate(int device, long bytes) {
    String call = "cuMemCreate";
    count(call, device, bytes);
    long host = SimNative.allocateZeroed(bytes);
    if (host == 0) {
      memoryInUse[device].addAndGet(-bytes);
      throw CudaError.exception(call, CudaError.CUDA_ERROR_OUT_OF_MEMORY,
          "the host could not provide " + bytes + " bytes of simulated device memory");
    }
    return host;
  }

  /** Counts {@code bytes} against device {@code device}'s memory, or throws out-of-memory. */
  void count(String call, int device, long bytes) {
    long limit = options.memoryBytes();
    AtomicLong inUse = memoryInUse[device];
    for (;;) {
      long used = inUse.get();
      if (bytes > limit - used) {
        throw CudaError.exception(call, CudaError.CUDA_ERROR_OUT_OF_MEMORY, String.format(
            "%d bytes asked for, %d of %d of device %d in use", bytes, used, limit, device));
      }
      if (inUse.compareAndSet(used, used + bytes)) {
        return;
      }
    }
  }

  void uncount(int device, long bytes) {
    memoryInUse[device].addAndGet(-bytes);
  }

  void free(int device, long host, long bytes) {
    SimNative.free(host);
    memoryInUse[device].addAndGet(-bytes);
  }

  /** Host ranges registered with {@code cuMemHostRegister}, by start; guarded by itself. */
  private final TreeMap<Long, Long> registered = new TreeMap<>();

  /** Records a registration; false if it overlaps one, as CUDA's 712 says. */
  boolean register(long address, long size) {
    synchronized (registered) {
      Map.Entry<Long, Long> below = registered.floorEntry(address + size - 1);
      if (below != null && below.getKey() + below.getValue() > address) {
        return false;
      }
      registered.put(address, size);
      return true;
    }
  }

  void unregister(long address) {
    synchronized (registered) {
      registered.remove(address);
    }
  }

  /**
   * Makes a host↔device copy of {@code bytes} that started at {@code startNanos} last as long as the modelled
   * bandwidth says: parks until close, then spins, so ~1 ms copies stay accurate. Returns early when the
   * thread is interrupted (a stream being destroyed).
   */
  void modelCopy(long bytes, long startNanos) {
    modelTransfer(bytes, startNanos, options.copyGBps());
  }

  /** {@link #modelCopy} for a copy between two devices' memory, at {@link SimOptions#peerGBps()}. */
  void modelPeerCopy(long bytes, long startNanos) {
    modelTransfer(bytes, startNanos, options.peerGBps());
  }

  private static void modelTransfer(long bytes, long startNanos, double gbps) {
    if (gbps <= 0) {
      return;
    }
    long deadline = startNanos + (long) (bytes / gbps);
    for (;;) {
      long left = deadline - System.nanoTime();
      if (left <= 0 || Thread.currentThread().isInterrupted()) {
        return;
      }
      if (left > 200_000) {
        LockSupport.parkNanos(left - 100_000);
      } else {
        Thread.onSpinWait();
      }
    }
  }

  @Override
  public String toString() {
    return "SimDriver[" + devices.get(0).describe() + (devices.size() > 1 ? " x" + devices.size() : "") + "]";
  }
}
