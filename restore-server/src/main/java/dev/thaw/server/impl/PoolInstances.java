package dev.thaw.server.impl;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPool;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PoolExhaustedException;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.pool.WorkerOutOfMemoryException;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.server.ServeException;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.StartPhases;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * One instance per worker process of the {@link ContextPool}: a cold start acquires a warm worker (its JVM,
 * driver and context already paid for) and tells it to become the image; requests travel to it over its pipe;
 * eviction releases it (the process exits, its device memory with it). Instances live in address spaces of their
 * own, so any images can be resident together, and a device fault kills one worker, never the server.
 */
public final class PoolInstances implements InstanceFactory {

  private static final ObjectMapper JSON = new ObjectMapper();

  private final ContextPool pool;
  private final ChunkStore store;
  private final Path storePath;
  private final List<DeviceInfo> devices;
  private final Duration acquireWait;
  private final long retryAfterSeconds;

  /**
   * @param pool the pool; closed with this factory
   * @param store the store the server reads manifests from
   * @param storePath the same store's folder, which workers open read-only
   * @param devices the devices the pool serves, with their memory (the server's placement budget)
   * @param acquireWait how long a cold start waits for a worker when none is idle
   */
  public PoolInstances(ContextPool pool, ChunkStore store, Path storePath, List<DeviceInfo> devices,
      Duration acquireWait, Duration retryAfter) {
    this.pool = pool;
    this.store = store;
    this.storePath = storePath;
    this.devices = List.copyOf(devices);
    this.acquireWait = acquireWait;
    this.retryAfterSeconds = Math.max(1, retryAfter.toSeconds());
  }

  @Override
  public String name() {
    return "pool";
  }

  @Override
  public List<DeviceInfo> devices() {
    return devices;
  }

  @Override
  public boolean sharedAddressSpace() {
    return false;
  }

  @Override
  public boolean canStart() {
    return pool.stats().stream().anyMatch(s -> s.idle() > 0);
  }

  @Override
  public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
    byte[] bytes = store.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
    long t = System.nanoTime();
    Worker worker;
    try {
      worker = pool.acquire(device, acquireWait);
    } catch (PoolExhaustedException e) {
      throw new ServeException(503, "no_worker", "no worker is free on device " + device + ": " + e.getMessage(),
          retryAfterSeconds);
    }
    double acquireMs = (System.nanoTime() - t) / 1e6;
    try {
      BecomeResult b = worker.becomeBlocking(tag, bytes, ImageSource.store(storePath));
      Map<String, Double> p = b.phases();
      // From the store the copy is "copy + verify"; from the host cache, "copy" (its bytes were verified on entry).
      double restoreMs = p.getOrDefault("copy + verify", p.getOrDefault("copy", 0.0))
          + p.getOrDefault("rebuild state", 0.0);
      // Everything else the BECOME took (parse, map, modules, the pipe both ways) is the map phase.
      double mapMs = Math.max(0, b.roundTripMillis() - restoreMs);
      String tier = b.source().equals("cache") ? "host-cache" : "store";
      return new Instance(worker, new StartPhases(acquireMs, mapMs, restoreMs, b.bytes(), tier));
    } catch (WorkerOutOfMemoryException e) {
      worker.release();
      throw new ServeException(503, "no_capacity", "image '" + tag + "' does not fit on device " + device + ": "
          + e.getMessage(), retryAfterSeconds);
    } catch (RuntimeException | Error e) {
      worker.release();
      throw e;
    }
  }

  @Override
  public void close() {
    pool.close();
  }

  private static final class Instance implements FunctionInstance {
    private final Worker worker;
    private final StartPhases phases;
    private volatile boolean healthy = true;

    Instance(Worker worker, StartPhases phases) {
      this.worker = worker;
      this.phases = phases;
    }

    @Override
    public StartPhases startPhases() {
      return phases;
    }

    @Override
    public int device() {
      return worker.device();
    }

    @Override
    public FunctionResponse invokeBlocking(FunctionRequest request) {
      byte[] json;
      try {
        json = JSON.writeValueAsBytes(request.json());
      } catch (JsonProcessingException e) {
        throw new InvalidRequestException("the request cannot be written as JSON: " + e.getOriginalMessage());
      }
      try {
        InvokeResult r = worker.invokeBlocking(json, request.binary().orElse(null), null);
        ByteBuffer binary = r.binary();
        return new FunctionResponse(r.jsonTree(),
            binary == null || !binary.hasRemaining() ? Optional.empty() : Optional.of(binary));
      } catch (WorkerException e) {
        if (e.kind() == WorkerErrorKind.INVALID_REQUEST) {
          throw new InvalidRequestException(e.getMessage());
        }
        if (e.workerLost() || !worker.isAlive()) {
          healthy = false;
        }
        throw e;
      }
    }

    @Override
    public boolean healthy() {
      return healthy && worker.isAlive();
    }

    @Override
    public String describe() {
      return "worker pid " + worker.pid() + " on device " + worker.device();
    }

    @Override
    public void close() {
      worker.release();
    }
  }
}
