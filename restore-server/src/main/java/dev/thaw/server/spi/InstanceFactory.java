package dev.thaw.server.spi;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.pool.ColdStartPlacement.Choice;
import dev.thaw.pool.ColdStartPlacement.DeviceView;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceInfo;
import io.micrometer.core.instrument.MeterRegistry;
import java.util.List;
import java.util.Optional;

/**
 * Makes {@link FunctionInstance}s: the plug-in point between the server and how instances run (in this process,
 * or one per worker process from the context pool). The server decides when and on which device; the factory
 * decides how.
 */
public interface InstanceFactory extends AutoCloseable {

  /** {@code in-process} or {@code pool}: for logs and {@code GET /v1/functions}. */
  String name();

  /** The devices instances can be placed on, by ordinal. */
  List<DeviceInfo> devices();

  /**
   * True when every instance lives in one address space (this process): two instances whose images' recorded
   * addresses overlap cannot exist together, so the server places them as it places memory.
   */
  boolean sharedAddressSpace();

  /**
   * Starts an instance of the image: the cold start. Blocks; the server calls it on the instance's own thread.
   *
   * @throws CudaOutOfMemoryException if the device cannot hold it (HTTP 503)
   * @throws Exception any other failure to restore (HTTP 500)
   */
  FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) throws Exception;

  /**
   * Starts an instance where {@link #place} chose and by the way it chose ({@code choice}'s device, the tier or links
   * its bytes come through). A factory with one way in starts it on the choice's device.
   */
  default FunctionInstance startBlocking(String tag, ImageManifest manifest, Choice choice) throws Exception {
    return startBlocking(tag, manifest, choice.device());
  }

  /**
   * Where a cold start of image {@code tag} ({@code imageBytes} of device memory) goes, over {@code devices} as the
   * server sees them now (whether the image fits each one's budget and instance slots, its free budget, whether it
   * runs a request); empty when it fits none. By default: the device that holds most of the image already
   * ({@link #residentBytes}, in the views' {@code tierBytes}), then the one with most free budget, then the lowest
   * ordinal. The pool prices every way in ({@code ColdStartPlacement}). Fast: the server calls it under its lock.
   */
  default Optional<Choice> place(String tag, long imageBytes, List<DeviceView> devices) {
    DeviceView best = null;
    for (DeviceView d : devices) {
      if (d.fits() && (best == null || d.tierBytes() > best.tierBytes()
          || d.tierBytes() == best.tierBytes() && d.freeBytes() > best.freeBytes())) {
        best = d;
      }
    }
    if (best == null) {
      return Optional.empty();
    }
    boolean held = best.tierBytes() > 0;
    return Optional.of(new Choice(best.ordinal(), held ? ColdStartPlacement.Source.HBM
        : ColdStartPlacement.Source.STORE, held ? best.ordinal() : -1, 0));
  }

  /**
   * How many instances {@code device} can hold at once, starting ones included: the server evicts idle instances of
   * other functions beyond it, as it does for memory. A pool of worker processes holds as many as it keeps workers,
   * less those it keeps idle so that a cold start never waits for a process to start.
   */
  default int maxInstances(int device) {
    return Integer.MAX_VALUE;
  }

  /**
   * True when a start could begin now without waiting for the factory itself (a warm worker is idle). Readiness
   * ({@code /v2/health/ready}) asks it for functions without a live instance.
   */
  default boolean canStart() {
    return true;
  }

  /**
   * A function now serves image {@code tag}: the factory may prepare its cold starts (the pool stages the image in
   * the host cache) in the background. Returns at once; the server calls it under its lock.
   */
  default void prepare(String tag, ImageManifest manifest) {}

  /**
   * True when this factory starts group images ({@link #startGroupBlocking}): one instance over several devices.
   */
  default boolean servesGroups() {
    return false;
  }

  /**
   * A function now serves the group {@code tag}: as {@link #prepare} for each rank's image. {@link #unprepare} of
   * {@code tag} lets them go.
   */
  default void prepareGroup(String tag, GroupImage.Stored group) {}

  /**
   * Starts an instance of the group {@code tag}, rank r's image on {@code devices.get(r)}, all ranks at once; blocks
   * until it serves.
   *
   * @throws UnsupportedOperationException when {@link #servesGroups()} is false (the server never calls it then)
   */
  default FunctionInstance startGroupBlocking(String tag, GroupImage.Stored group, List<Integer> devices)
      throws Exception {
    throw new UnsupportedOperationException(name() + " instances serve no groups");
  }

  /**
   * No function serves image {@code tag} any more: the factory may let what it prepared for it go. Returns at once;
   * the server calls it under its lock.
   */
  default void unprepare(String tag) {}

  /** Registers the factory's own gauges (e.g. its worker pool's sizes) with the server's metrics. */
  default void bindMetrics(MeterRegistry registry) {}

  /**
   * Where the factory holds image {@code tag} now, for {@code GET /v1/functions/{name}} ({@code "image"}), or null
   * when it holds nothing of its own. Fast: the server calls it under its lock.
   */
  default JsonNode imageState(String tag) {
    return null;
  }

  /**
   * Bytes of image {@code tag} the factory keeps on {@code device} already, which a start there maps instead of
   * copying (the pool's HBM tier: read-only weights an evicted instance left on the GPU); 0 when none. The server
   * places a new instance on the device that holds most of its image, where it fits, before it looks at free
   * memory ({@link #place}). Fast: the server calls it under its lock.
   */
  default long residentBytes(String tag, int device) {
    return 0;
  }

  /**
   * Why this factory can start and run nothing any more, or null while it can: instances in the server's own process
   * after a sticky CUDA error (an illegal address: CUDA in the process is unusable until it ends). The server then
   * fails liveness ({@code /v2/health/live} 503), so that its supervisor restarts it. Fast: any thread calls it.
   */
  default String poisoned() {
    return null;
  }

  /** Releases what the factory holds (idle workers, contexts). Instances it made are closed by the server first. */
  @Override
  void close();
}
