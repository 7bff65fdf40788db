package dev.thaw.runtime.gpu.cuda;

import static dev.thaw.runtime.gpu.cuda.CudaNative.check;

import com.sun.jna.NativeLibrary;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.DriverAvailability;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuUnavailableException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The CUDA driver: the CUDA Driver API ({@code libcuda.so.1}) through JNA direct mapping.
 *
 * <p>{@link #availability()} says whether it can be used here and, if not, why; it never throws.
 * {@link #open()} opens it.
 */
public final class CudaDriver implements GpuDriver {

  private static final Logger LOG = LoggerFactory.getLogger(CudaDriver.class);

  private static final Object AVAILABILITY_LOCK = new Object();
  private static volatile DriverAvailability availability;
  private static volatile Throwable unavailabilityError;

  private final int driverVersion;
  private final List<DeviceInfo> devices;
  private final int[] deviceHandles;
  private final AtomicBoolean closed = new AtomicBoolean();
  private static volatile DeviceAddressArena arena;

  private CudaDriver(int driverVersion, List<DeviceInfo> devices, int[] deviceHandles) {
    this.driverVersion = driverVersion;
    this.devices = List.copyOf(devices);
    this.deviceHandles = deviceHandles;
  }

  /**
   * Whether CUDA is usable here: {@code libcuda.so.1} loads with every symbol Thaw binds, {@code cuInit(0)}
   * succeeds and at least one device is visible. Computed once; never throws.
   */
  public static DriverAvailability availability() {
    DriverAvailability a = availability;
    if (a == null) {
      synchronized (AVAILABILITY_LOCK) {
        a = availability;
        if (a == null) {
          a = probe();
          availability = a;
        }
      }
    }
    return a;
  }

  private static DriverAvailability probe() {
    try {
      try {
        NativeLibrary.getInstance(CudaNative.LIBRARY);
      } catch (LinkageError e) {
        return unavailable(CudaNative.LIBRARY + " not found: " + loaderReason(e.getMessage()), e);
      }
      try {
        CudaNative.load();
      } catch (LinkageError e) {
        Throwable cause = e instanceof ExceptionInInitializerError && e.getCause() != null ? e.getCause() : e;
        return unavailable(CudaNative.LIBRARY + " cannot be bound (a CUDA 13.0 driver is needed): "
            + cause.getMessage(), cause);
      }
      int r = CudaNative.cuInit(0);
      if (r != CudaNative.CUDA_SUCCESS) {
        return unavailable("cuInit failed: " + CudaNative.errorName(r) + " (" + r + ")", null);
      }
      CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
      r = CudaNative.cuDeviceGetCount(s.address);
      if (r != CudaNative.CUDA_SUCCESS) {
        return unavailable("cuDeviceGetCount failed: " + CudaNative.errorName(r) + " (" + r + ")", null);
      }
      if (s.memory.getInt(0) < 1) {
        return unavailable("no CUDA device is visible (cuDeviceGetCount returned 0)", null);
      }
      return DriverAvailability.yes();
    } catch (RuntimeException | LinkageError e) {
      return unavailable("CUDA probe failed: " + e, e);
    }
  }

  /**
   * JNA's message lists every place it looked, the class path included; the dynamic loader's own reason
   * (its second line) is what a person needs. The whole error stays the cause of {@link #open()}'s exception.
   */
  private static String loaderReason(String message) {
    if (message == null) {
      return "(no reason given)";
    }
    String[] lines = message.split("\n");
    return lines.length > 1 && !lines[1].isBlank() ? lines[1].strip() : lines[0].strip();
  }

  private static DriverAvailability unavailable(String cause, Throwable error) {
    unavailabilityError = error;
    return DriverAvailability.no(cause);
  }

  /**
   * Opens the driver and reads what every visible device is.
   *
   * @throws GpuUnavailableException if {@link #availability()} says CUDA is not usable, with the reason
   */
  public static CudaDriver open() {
    DriverAvailability a = availability();
    if (!a.available()) {
      GpuUnavailableException e = new GpuUnavailableException("CUDA is not available: " + a.unavailabilityCause());
      Throwable cause = unavailabilityError;
      if (cause != null) {
        e.initCause(cause);
      }
      throw e;
    }
    CudaNative.Scratch s = CudaNative.Scratch.get();
    s.clear(8);
    check(CudaNative.cuDriverGetVersion(s.address), "cuDriverGetVersion");
    int version = s.memory.getInt(0);
    s.clear(8);
    check(CudaNative.cuDeviceGetCount(s.address), "cuDeviceGetCount");
    int count = s.memory.getInt(0);
    List<DeviceInfo> infos = new ArrayList<>(count);
    int[] handles = new int[count];
    for (int ordinal = 0; ordinal < count; ordinal++) {
      handles[ordinal] = deviceHandle(ordinal);
      infos.add(describe(ordinal, handles[ordinal]));
    }
    return new CudaDriver(version, infos, handles);
  }

  private static int deviceHandle(int ordinal) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuDeviceGet(s.address, ordinal), "cuDeviceGet");
    return s.memory.getInt(0);
  }

  private static DeviceInfo describe(int ordinal, int dev) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(256);
    check(CudaNative.cuDeviceGetName(s.address, 256, dev), "cuDeviceGetName");
    String name = s.memory.getString(0, "UTF-8");
    int major = attribute(CudaNative.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    int minor = attribute(CudaNative.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    int sms = attribute(CudaNative.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    s.clear(8);
    check(CudaNative.cuDeviceTotalMem_v2(s.address, dev), "cuDeviceTotalMem_v2");
    long total = s.memory.getLong(0);
    s.clear(CudaNative.UUID_SIZE);
    check(CudaNative.cuDeviceGetUuid_v2(s.address, dev), "cuDeviceGetUuid_v2");
    String uuid = formatUuid(s.memory.getByteArray(0, CudaNative.UUID_SIZE));
    return new DeviceInfo(ordinal, name, major, minor, total, uuid, sms);
  }

  private static int attribute(int attribute, int dev) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuDeviceGetAttribute(s.address, attribute, dev), "cuDeviceGetAttribute");
    return s.memory.getInt(0);
  }

  /** As {@code nvidia-smi} prints it: {@code GPU-} then the 16 bytes in order, lowercase hex, grouped 4-2-2-2-6. */
  static String formatUuid(byte[] bytes) {
    StringBuilder sb = new StringBuilder("GPU-");
    for (int i = 0; i < bytes.length; i++) {
      if (i == 4 || i == 6 || i == 8 || i == 10) {
        sb.append('-');
      }
      sb.append(Character.forDigit((bytes[i] >> 4) & 0xf, 16)).append(Character.forDigit(bytes[i] & 0xf, 16));
    }
    return sb.toString();
  }

  @Override
  public String name() {
    return "cuda";
  }

  @Override
  public boolean isSimulated() {
    return false;
  }

  @Override
  public int driverVersion() {
    checkOpen();
    return driverVersion;
  }

  @Override
  public List<DeviceInfo> devices() {
    checkOpen();
    return devices;
  }

  /**
   * The process's device address arena, reserved at the first call. The reservation is made with the
   * device's primary context current, which the process then keeps, so that the arena does not depend on
   * any context a caller may close; it lives as long as the process.
   */
  static DeviceAddressArena arena(int deviceHandle) {
    DeviceAddressArena a = arena;
    if (a == null) {
      synchronized (CudaDriver.class) {
        a = arena;
        if (a == null) {
          a = arena = reserveArena(deviceHandle);
        }
      }
    }
    return a;
  }

  private static DeviceAddressArena reserveArena(int deviceHandle) {
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(16);
    check(CudaNative.cuDevicePrimaryCtxRetain(s.address, deviceHandle), "cuDevicePrimaryCtxRetain");
    check(CudaNative.cuCtxPushCurrent_v2(s.memory.getLong(0)), "cuCtxPushCurrent_v2");
    try {
      long got = 0;
      for (long base : DeviceAddressArena.CANDIDATE_BASES) {
        check(CudaNative.cuMemAddressReserve(s.address + 8, DeviceAddressArena.SIZE, 0L, base, 0L),
            "cuMemAddressReserve");
        got = s.memory.getLong(8);
        if (got == base) {
          LOG.debug("device address arena at 0x{}", Long.toHexString(base));
          return new DeviceAddressArena(base, DeviceAddressArena.SIZE);
        }
        check(CudaNative.cuMemAddressFree(got, DeviceAddressArena.SIZE), "cuMemAddressFree");
      }
      check(CudaNative.cuMemAddressReserve(s.address + 8, DeviceAddressArena.SIZE, 0L, 0L, 0L),
          "cuMemAddressReserve");
      got = s.memory.getLong(8);
      LOG.warn("no fixed device address arena base was free; using 0x{}, so other processes cannot map the same"
          + " addresses", Long.toHexString(got));
      return new DeviceAddressArena(got, DeviceAddressArena.SIZE);
    } finally {
      check(CudaNative.cuCtxPopCurrent_v2(s.address), "cuCtxPopCurrent_v2");
    }
  }

  @Override
  public GpuContext createContext(int deviceOrdinal) {
    checkOpen();
    if (deviceOrdinal < 0 || deviceOrdinal >= devices.size()) {
      throw new IllegalArgumentException("no CUDA device has ordinal " + deviceOrdinal + "; "
          + devices.size() + " visible");
    }
    return CudaContext.create(this, devices.get(deviceOrdinal), deviceHandles[deviceOrdinal]);
  }

  /** {@code cuDeviceCanAccessPeer}. */
  @Override
  public boolean canAccessPeer(int device, int peerDevice) {
    checkOpen();
    GpuDriver.checkPeerOrdinals(this, device, peerDevice);
    CudaNative.Scratch s = CudaNative.Scratch.get().clear(8);
    check(CudaNative.cuDeviceCanAccessPeer(s.address, deviceHandles[device], deviceHandles[peerDevice]),
        "cuDeviceCanAccessPeer");
    return s.memory.getInt(0) != 0;
  }

  @Override
  public void prepareDevice(int deviceOrdinal) {
    checkOpen();
    if (deviceOrdinal < 0 || deviceOrdinal >= devices.size()) {
      throw new IllegalArgumentException("no CUDA device has ordinal " + deviceOrdinal + "; "
          + devices.size() + " visible");
    }
    arena(deviceHandles[deviceOrdinal]);
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("CUDA driver is closed");
    }
  }

  /** Marks the driver closed; contexts still open stay usable, as {@link GpuDriver#close()} says. */
  @Override
  public void close() {
    closed.set(true);
  }

  @Override
  public String toString() {
    return "CudaDriver[" + driverVersion + ", " + devices.size() + " device(s)]";
  }
}
