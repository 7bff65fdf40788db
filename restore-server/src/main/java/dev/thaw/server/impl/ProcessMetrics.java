package dev.thaw.server.impl;

import com.sun.management.OperatingSystemMXBean;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tag;
import io.micrometer.core.instrument.binder.jvm.ClassLoaderMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmInfoMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.FileDescriptorMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.core.instrument.config.MeterFilter;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * What the server's process exports beside its functions: the JVM and the process through Micrometer's binders
 * ({@code jvm_*}, {@code process_*}, {@code system_*}), and the HTTP responses it sent by status code. Codes are a
 * bounded label (at most the three-digit codes); the ones the API answers with are registered at zero from the start.
 *
 * <p>The binders are bound at the first scrape ({@link #bindProcess()}), not with the server: binding them costs a
 * cold JVM a good part of a second (management beans, GC listeners) that a server starting from zero must not spend
 * before its first response. Every scrape lists them; GC pauses are counted from the first scrape on.
 */
public final class ProcessMetrics implements AutoCloseable {

  /** The codes the API documents, listed at zero before the first response. */
  static final List<Integer> CODES = List.of(200, 201, 400, 401, 404, 413, 415, 429, 500, 502, 503);

  private final MeterRegistry registry;
  private JvmGcMetrics gc;
  private final Map<Integer, Counter> responses = new ConcurrentHashMap<>();
  private final Counter abandoned;

  /**
   * The registry {@code /metrics} exposes: Prometheus text, {@code labels} on every meter, and the binders' names made
   * ones Prometheus's checker accepts ({@code process_cpu_seconds_total} in seconds, as Prometheus's own clients name
   * it, for Micrometer's {@code process_cpu_time_ns_total}; {@code system_cpus} for {@code system_cpu_count}, which
   * reads as a histogram's count). Its filters are in place before any meter, as filters must be.
   */
  public static PrometheusMeterRegistry registry(Map<String, String> labels) {
    PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
    List<Tag> common = new ArrayList<>();
    labels.forEach((k, v) -> common.add(Tag.of(k, v)));
    registry.config().commonTags(common).meterFilter(MeterFilter.deny(id -> id.getName().equals("process.cpu.time")))
        .meterFilter(new MeterFilter() {
          @Override
          public Meter.Id map(Meter.Id id) {
            return id.getName().equals("system.cpu.count") ? id.withName("system.cpus") : id;
          }
        });
    return registry;
  }

  ProcessMetrics(MeterRegistry registry) {
    this.registry = registry;
    CODES.forEach(this::response);
    abandoned = Counter.builder("thaw.http.abandoned")
        .description("HTTP requests whose client closed the connection before the response").register(registry);
  }

  /** Binds the JVM's and the process's meters, once; blocks (call it off the event loop). */
  synchronized void bindProcess() {
    if (gc != null) {
      return;
    }
    gc = new JvmGcMetrics();
    gc.bindTo(registry);
    new JvmMemoryMetrics().bindTo(registry);
    new JvmThreadMetrics().bindTo(registry);
    new ClassLoaderMetrics().bindTo(registry);
    new JvmInfoMetrics().bindTo(registry);
    new ProcessorMetrics().bindTo(registry);
    OperatingSystemMXBean os = ManagementFactory.getPlatformMXBean(OperatingSystemMXBean.class);
    if (os != null) {
      FunctionCounter.builder("process.cpu", os, o -> o.getProcessCpuTime() / 1e9).baseUnit("seconds")
          .description("CPU time the server's process used").register(registry);
    }
    new UptimeMetrics().bindTo(registry);
    new FileDescriptorMetrics().bindTo(registry);
  }

  private Counter response(int code) {
    return responses.computeIfAbsent(code, c -> Counter.builder("thaw.http.responses").tag("code", Integer.toString(c))
        .description("HTTP responses sent, by status code").register(registry));
  }

  /** One response went out with {@code code}. */
  void responded(int code) {
    response(code < 100 || code > 999 ? 0 : code).increment();
  }

  /** One request's client left before its response. */
  void abandoned() {
    abandoned.increment();
  }

  @Override
  public synchronized void close() {
    if (gc != null) {
      gc.close();
    }
  }
}
