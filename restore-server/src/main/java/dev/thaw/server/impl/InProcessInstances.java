package dev.thaw.server.impl;

import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.ImageRestorer;
import dev.thaw.image.restore.RestoreTimings;
import dev.thaw.image.restore.RestoredFunction;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.StartPhases;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Instances in this process: each a fresh context on the driver with the image fully restored into it by
 * {@link ImageRestorer}. Right for the simulated device, for {@code thaw demo} and for one tenant; every
 * instance shares the process's address space, so images whose recorded addresses overlap cannot be resident
 * together (the server evicts or refuses), and a device fault takes the context with it (the instance turns
 * unhealthy and is evicted).
 */
public final class InProcessInstances implements InstanceFactory {

  private final GpuDriver driver;
  private final ChunkStore store;
  private final java.util.function.Supplier<GpuDriver> ownDriver;

  /** Every instance a context on {@code driver}, all in its one address space. */
  public InProcessInstances(GpuDriver driver, ChunkStore store) {
    this(driver, store, null);
  }

  private InProcessInstances(GpuDriver driver, ChunkStore store, java.util.function.Supplier<GpuDriver> ownDriver) {
    this.driver = driver;
    this.store = store;
    this.ownDriver = ownDriver;
  }

  /**
   * Every instance on a driver of its own, opened by {@code drivers} and closed with the instance: on the sim
   * device each has its own address space, as a worker process has, so instances of one image can coexist. (A
   * CUDA driver has one address space per process, so this is for the sim device.)
   */
  public static InProcessInstances isolated(GpuDriver devices, ChunkStore store,
      java.util.function.Supplier<GpuDriver> drivers) {
    return new InProcessInstances(devices, store, drivers);
  }

  @Override
  public String name() {
    return "in-process";
  }

  @Override
  public List<DeviceInfo> devices() {
    return driver.devices();
  }

  @Override
  public boolean sharedAddressSpace() {
    return ownDriver == null;
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
    long t = System.nanoTime();
    GpuDriver own = ownDriver == null ? null : ownDriver.get();
    GpuContext context;
    try {
      context = (own == null ? driver : own).createContext(device);
    } catch (RuntimeException | Error e) {
      if (own != null) {
        own.close();
      }
      throw e;
    }
    double acquireMs = (System.nanoTime() - t) / 1e6;
    try {
      RestoredFunction<?> f = new ImageRestorer(store).restore(tag, context);
      RestoreTimings r = f.timings();
      StartPhases phases = new StartPhases(acquireMs, r.openMillis() + r.mapMillis() + r.modulesMillis(),
          r.copyMillis() + r.stateMillis(), r.bytes(), "store");
      return new Instance(own, context, f, phases, device);
    } catch (RuntimeException | Error e) {
      context.close();
      if (own != null) {
        own.close();
      }
      throw e;
    }
  }

  @Override
  public void close() {
    // Contexts belong to their instances; the driver belongs to whoever opened it.
  }

  private static final class Instance implements FunctionInstance {
    private final GpuDriver own;
    private final GpuContext context;
    private final RestoredFunction<?> function;
    private final StartPhases phases;
    private final int device;
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile boolean healthy = true;

    Instance(GpuDriver own, GpuContext context, RestoredFunction<?> function, StartPhases phases, int device) {
      this.own = own;
      this.context = context;
      this.function = function;
      this.phases = phases;
      this.device = device;
    }

    @Override
    public StartPhases startPhases() {
      return phases;
    }

    @Override
    public int device() {
      return device;
    }

    @Override
    public FunctionResponse invokeBlocking(FunctionRequest request) throws Exception {
      try {
        return function.invoke(request);
      } catch (InvalidRequestException e) {
        throw e;
      } catch (Exception | Error e) {
        // The function promises to leave the device fit after refusing a request, not after anything else: a
        // fault may have poisoned the context, so this instance serves no more.
        healthy = false;
        throw e;
      }
    }

    @Override
    public boolean healthy() {
      return healthy && !closed.get();
    }

    @Override
    public String describe() {
      return "in-process on device " + device;
    }

    @Override
    public void close() {
      if (closed.compareAndSet(false, true)) {
        try {
          function.close();
        } finally {
          try {
            context.close();
          } finally {
            if (own != null) {
              own.close();
            }
          }
        }
      }
    }
  }
}
