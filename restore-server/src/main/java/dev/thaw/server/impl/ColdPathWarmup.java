package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.StartPhases;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The server's own part of a cold start, run once ahead through a throwaway {@link Scheduler}: a function whose
 * stand-in instance starts and answers at once gets a cold request, then a warm one, and its trace is read. That
 * loads, links and runs once, off any request's way, the code the server's first cold request would otherwise be
 * the first to run around its start and after its invoke (the scheduler's queue and slot, a start's metrics, the
 * dispatch, the cold start's trace, the request's phases and Server-Timing; {@code docs/design/server.md}, "The first
 * cold request"). The phase timers, whose first registration is the costliest of it, the scheduler makes when it is
 * made. Nothing of the real server is touched: its own scheduler, metrics,
 * instances, pool and GPU state stay as they are.
 */
public final class ColdPathWarmup {

  static final String FUNCTION = "warmup";

  private ColdPathWarmup() {}

  /** Runs it on a thread of its own; completes with what {@link #run} returns. */
  public static CompletableFuture<String> start(List<DeviceInfo> devices) {
    CompletableFuture<String> done = new CompletableFuture<>();
    Threads.startDaemon(() -> done.complete(run(devices)), "thaw-cold-path-warmup");
    return done;
  }

  /**
   * Runs it on the calling thread.
   *
   * @param devices the server's devices (the stand-in places its instance as a real one would)
   * @return the two requests' starts, {@code "cold warm"}, or {@code "not run: "} and why
   */
  public static String run(List<DeviceInfo> devices) {
    if (devices.isEmpty()) {
      return "not run: no device";
    }
    PrometheusMeterRegistry metrics = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    try (Scheduler s = new Scheduler(new StandIns(devices), metrics, 0, Duration.ofSeconds(1), 1, Duration.ZERO)) {
      s.register(FUNCTION, new FunctionOptions().setImage(FUNCTION), new ImageInfo(FUNCTION, null, null, 0,
          List.of()));
      ObjectNode body = JsonNodeFactory.instance.objectNode();
      body.putArray("inputs").addArray().add(0.5).add(-1.5);
      StringBuilder starts = new StringBuilder();
      for (int i = 0; i < 2; i++) {
        Invocation inv = s.submit(FUNCTION, FunctionRequest.of(body)).result().get(10, TimeUnit.SECONDS);
        inv.serverTiming(inv.phases().values().stream().mapToDouble(Double::doubleValue).sum());
        starts.append(i == 0 ? "" : " ").append(inv.cold() ? "cold" : "warm");
      }
      s.trace(FUNCTION);
      return starts.toString();
    } catch (ExecutionException | TimeoutException | RuntimeException e) {
      return "not run: " + e;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return "not run: interrupted";
    } finally {
      metrics.close();
    }
  }

  /** Instances that start at once, hold nothing and answer with the request, invoking asynchronously as workers do. */
  private record StandIns(List<DeviceInfo> devices) implements InstanceFactory {

    @Override
    public String name() {
      return "warmup";
    }

    @Override
    public boolean sharedAddressSpace() {
      return false;
    }

    @Override
    public FunctionInstance startBlocking(String tag, ImageManifest manifest, int device) {
      return new StandIn(device);
    }

    @Override
    public void close() {}
  }

  private record StandIn(int device) implements FunctionInstance {

    @Override
    public StartPhases startPhases() {
      return new StartPhases(0, 0, 0, 0, "host-cache");
    }

    @Override
    public FunctionResponse invokeBlocking(FunctionRequest request) {
      return FunctionResponse.of(request.json());
    }

    @Override
    public boolean invokesAsync() {
      return true;
    }

    @Override
    public CompletableFuture<Invoked> invoke(FunctionRequest request) {
      return CompletableFuture.completedFuture(new Invoked(invokeBlocking(request), 0));
    }

    /** A one-copy timeline, so that the cold start's trace takes a restore's rows as a worker's would. */
    @Override
    public CompletableFuture<RestoreTimeline> restoreTimeline() {
      ObjectNode trace = JsonNodeFactory.instance.objectNode();
      ObjectNode copy = trace.putArray("traceEvents").addObject();
      copy.put("name", "copy").put("ph", "X").put("ts", 0.0).put("dur", 1.0).put("pid", 1).put("tid", 2);
      return CompletableFuture.completedFuture(new RestoreTimeline((JsonNode) trace, System.nanoTime()));
    }

    @Override
    public boolean healthy() {
      return true;
    }

    @Override
    public String describe() {
      return "a stand-in warming the cold path";
    }

    @Override
    public void close() {}
  }
}
