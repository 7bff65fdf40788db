package dev.thaw.server.impl;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;
import java.util.function.ToIntBiFunction;
import java.util.function.ToIntFunction;

/**
 * The scheduler's meters, all of them defined here: name, help, labels, and which carry a {@code function} label.
 * Every meter is registered before anything can count on it, so that {@code /metrics} lists it at zero from the start:
 * the server-wide ones with the scheduler, a function's own when it is registered.
 *
 * <p>Cardinality is bounded independently of how many functions a node serves: histograms carry no {@code function}
 * label ({@code thaw_phase_seconds{phase,start}}: 7 series of {@link #PHASE_BUCKETS} buckets each), and a function adds
 * a fixed set of {@link #SERIES_PER_FUNCTION} counter and gauge series (invocations by start and outcome, their total
 * seconds, instances by state, queue depth, refusals, restored bytes by tier, start failures, evictions by reason). A
 * function's series are removed once it is deleted and its last instance is gone.
 */
public final class ServerMetrics {

  /** Histogram buckets of {@code thaw_phase_seconds}: from a warm invoke's 0.1 ms to a cold start from the store. */
  static final List<Duration> PHASE_BUCKETS = List.of(Duration.ofNanos(100_000), Duration.ofNanos(250_000),
      Duration.ofNanos(500_000), Duration.ofMillis(1), Duration.ofNanos(2_500_000), Duration.ofMillis(5),
      Duration.ofMillis(10), Duration.ofMillis(25), Duration.ofMillis(50), Duration.ofMillis(100),
      Duration.ofMillis(250), Duration.ofMillis(500), Duration.ofSeconds(1), Duration.ofMillis(2500),
      Duration.ofSeconds(5), Duration.ofSeconds(10), Duration.ofSeconds(30), Duration.ofSeconds(60));
  static final List<String> COLD_PHASES = List.of("queue", "acquire", "map", "restore-wait", "invoke");
  static final List<String> WARM_PHASES = List.of("queue", "invoke");
  static final List<String> STATES = List.of("starting", "idle", "busy");
  static final List<String> TIERS = List.of("store", "host-cache", "hbm");
  static final List<String> REJECTIONS = List.of("queue_full", "no_memory");
  /**
   * Why an instance was evicted: idle past keepAlive, to make room for another function, after it failed, or because
   * its process ended on its own (while idle, or before a request reached it).
   */
  static final List<String> EVICTIONS = List.of("keep_alive", "memory", "unhealthy", "lost");
  /** The series one function adds; {@code ServerMetricsTest} holds the exposition to it. */
  public static final int SERIES_PER_FUNCTION = 4 + 2 + STATES.size() + 1 + REJECTIONS.size() + TIERS.size() + 1
      + EVICTIONS.size();

  private final MeterRegistry registry;
  private final ToIntBiFunction<String, String> instances;
  private final ToIntFunction<String> queued;
  private final Map<String, Timer> phases = new HashMap<>();
  private final Map<String, Function> functions = new HashMap<>();
  final Counter wakeCaught;
  final Counter wakeMissed;
  final Counter closeFailures;

  /**
   * @param instances a function's instances in a state ({@code starting}, {@code idle}, {@code busy})
   * @param queued a function's requests waiting for an instance
   */
  ServerMetrics(MeterRegistry registry, ToIntBiFunction<String, String> instances, ToIntFunction<String> queued) {
    this.registry = registry;
    this.instances = instances;
    this.queued = queued;
    for (String phase : COLD_PHASES) {
      phase(phase, "cold");
    }
    for (String phase : WARM_PHASES) {
      phase(phase, "warm");
    }
    wakeCaught = Counter.builder("thaw.wake.ahead").tag("outcome", "caught")
        .description("long warm invokes whose answer found its event loop awake (polling since shortly before), "
            + "and those whose poll gave up first").register(registry);
    wakeMissed = Counter.builder("thaw.wake.ahead").tag("outcome", "missed")
        .description("long warm invokes whose answer found its event loop awake (polling since shortly before), "
            + "and those whose poll gave up first").register(registry);
    closeFailures = Counter.builder("thaw.close.failures").description("instances whose close failed")
        .register(registry);
  }

  /** {@code thaw_gpu_memory_budget_bytes} and {@code thaw_gpu_memory_reserved_bytes} of device {@code device}. */
  void device(int device, Supplier<Number> budget, Supplier<Number> reserved) {
    Gauge.builder("thaw.gpu.memory.budget", budget).tag("device", Integer.toString(device)).baseUnit("bytes")
        .description("device memory instances may use").register(registry);
    Gauge.builder("thaw.gpu.memory.reserved", reserved).tag("device", Integer.toString(device)).baseUnit("bytes")
        .description("device memory held by instances (starting ones included)").register(registry);
  }

  private Timer phase(String phase, String start) {
    return phases.computeIfAbsent(phase + "/" + start, k -> Timer.builder("thaw.phase").tag("phase", phase)
        .tag("start", start).serviceLevelObjectives(PHASE_BUCKETS.toArray(Duration[]::new))
        .description("time per request phase, across functions (per function: thaw_invocation_seconds_total)")
        .register(registry));
  }

  void recordPhase(String phase, String start, double millis) {
    phase(phase, start).record(Duration.ofNanos(Math.round(millis * 1e6)));
  }

  /** The meters of function {@code name}, registered now if they are not yet (a function replaced keeps them). */
  synchronized Function function(String name) {
    return functions.computeIfAbsent(name, Function::new);
  }

  /** Removes function {@code name}'s series: called once no deployment of that name is left. */
  synchronized void remove(String name) {
    Function f = functions.remove(name);
    if (f != null) {
      f.meters.forEach(registry::remove);
    }
  }

  /** Removes every function's series. */
  synchronized void removeAll() {
    List.copyOf(functions.keySet()).forEach(this::remove);
  }

  /** One function's series, all registered at once. */
  final class Function {
    private final List<Meter> meters = new ArrayList<>();
    private final Map<String, Counter> invocations = new HashMap<>();
    private final Map<String, Counter> seconds = new HashMap<>();
    private final Map<String, Counter> restoreBytes = new HashMap<>();
    private final Map<String, Counter> evictions = new HashMap<>();
    private final String name;
    final Counter queueFull;
    final Counter noMemory;
    final Counter startFailures;

    private Function(String name) {
      this.name = name;
      for (String start : List.of("cold", "warm")) {
        for (String outcome : List.of("ok", "error")) {
          invocations.put(start + outcome, add(Counter.builder("thaw.invocations").tag("function", name)
              .tag("start", start).tag("outcome", outcome)
              .description("requests served by an instance, by start (cold: its instance's first) and outcome")
              .register(registry)));
        }
        seconds.put(start, add(Counter.builder("thaw.invocation.seconds").tag("function", name).tag("start", start)
            .description("seconds requests spent in the scheduler (queue, start, invoke); with thaw_invocations_total "
                + "a function's mean").register(registry)));
      }
      for (String state : STATES) {
        add(Gauge.builder("thaw.instances", () -> instances.applyAsInt(name, state)).tag("function", name)
            .tag("state", state).description("instances of a function by state").register(registry));
      }
      add(Gauge.builder("thaw.queue.depth", () -> queued.applyAsInt(name)).tag("function", name)
          .description("requests waiting for an instance").register(registry));
      queueFull = add(rejected("queue_full"));
      noMemory = add(rejected("no_memory"));
      for (String tier : TIERS) {
        restoreBytes.put(tier, add(restoreBytes(tier)));
      }
      startFailures = add(Counter.builder("thaw.start.failures").tag("function", name)
          .description("instance starts that failed").register(registry));
      for (String reason : EVICTIONS) {
        evictions.put(reason, add(Counter.builder("thaw.evictions").tag("function", name).tag("reason", reason)
            .description("instances evicted, by reason (keep_alive: idle past it; memory: to make room for another "
                + "function; unhealthy: its invoke failed)").register(registry)));
      }
    }

    private Counter rejected(String reason) {
      return Counter.builder("thaw.rejected").tag("function", name).tag("reason", reason)
          .description("requests refused before they reached an instance").register(registry);
    }

    private Counter restoreBytes(String tier) {
      return Counter.builder("thaw.restore.bytes").tag("function", name).tag("tier", tier)
          .description("device bytes restored by cold starts, by the tier they came from").register(registry);
    }

    private <M extends Meter> M add(M meter) {
      meters.add(meter);
      return meter;
    }

    void invoked(boolean cold, boolean ok, double millis) {
      invocations.get((cold ? "cold" : "warm") + (ok ? "ok" : "error")).increment();
      seconds.get(cold ? "cold" : "warm").increment(millis / 1e3);
    }

    void restored(String tier, long bytes) {
      Counter c;
      synchronized (ServerMetrics.this) {
        c = restoreBytes.computeIfAbsent(tier, t -> add(restoreBytes(t)));
      }
      c.increment(bytes);
    }

    void evicted(String reason) {
      evictions.get(reason).increment();
    }
  }
}
