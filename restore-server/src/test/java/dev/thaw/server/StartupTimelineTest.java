package dev.thaw.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.pool.WorkerStart;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/** Pins what the startup line says: events in time order from the origin, the worker's start placed on it, once. */
class StartupTimelineTest {

  @Test
  void theLineTellsEveryStepInTimeOrderAndIsMadeOnce() {
    long origin = System.nanoTime() - 1_000_000_000L;
    StartupTimeline t = StartupTimeline.since(origin);
    t.markAt("main", origin + 100_000_000L);
    t.markAt("store", origin + 300_000_000L);
    t.markAt("driver", origin + 250_000_000L);
    Map<String, Double> workerPhases = new LinkedHashMap<>();
    workerPhases.put("jvm", 150.0);
    workerPhases.put("context", 430.0);
    long ready = origin + 900_000_000L;
    t.instanceStarted(new WorkerStart(7, "cuda", false, "H200", workerPhases, 600.0, ready), Map.of("total", 40.0));
    t.instanceStarted(null, Map.of("total", 99.0));
    assertNull(t.line(), "no line before the first response");

    String line = t.firstResponse("mlp", Map.of("invoke", 5.0)).orElseThrow();
    assertTrue(t.firstResponse("mlp", Map.of("invoke", 1.0)).isEmpty(), "made once");
    assertEquals(line, t.line());
    assertTrue(line.startsWith("startup ") && line.contains("to first response (mlp)"), line);
    int main = line.indexOf("main 100.0");
    int driver = line.indexOf("driver 250.0");
    int spawned = line.indexOf("worker spawned 300.0");
    int store = line.indexOf("store 300.0");
    int workerReady = line.indexOf("worker ready 900.0");
    assertTrue(main > 0 && driver > main && store > driver && spawned > 0 && workerReady > store, line);
    assertTrue(line.contains("; worker spawn to ready 600.0 ms: jvm 150.0 context 430.0"), line);
    assertTrue(line.contains("; instance start ms: total 40.0") && !line.contains("99.0"), "the first start only: "
        + line);
    assertTrue(line.endsWith("; first request ms: invoke 5.0"), line);
    List<String> names = t.events().stream().map(StartupTimeline.Event::name).toList();
    assertTrue(names.containsAll(List.of("main", "store", "driver", "worker spawned", "worker ready",
        "instance started", "first response")), names.toString());
  }

  @Test
  void theOriginIsTheProcessStart() {
    StartupTimeline t = StartupTimeline.sinceProcessStart();
    double now = t.millis(System.nanoTime());
    double up = ManagementFactory.getRuntimeMXBean().getUptime();
    // The process began before the JVM's uptime clock started, never after it.
    assertTrue(now >= up - 20, "now " + now + " ms since process start, JVM uptime " + up + " ms");
  }

  @Test
  void theProcessStartComesFromTheKernelsCountSinceBootNotTheWholeSecondBootTime() {
    Assumptions.assumeTrue(Files.isReadable(Path.of("/proc/self/stat")),
        "no /proc here: the timeline falls back to ProcessHandle's start instant");
    long jvmUptimeNanos = ManagementFactory.getRuntimeMXBean().getUptime() * 1_000_000L;
    long ago = StartupTimeline.sinceBootAgo().orElseThrow();
    // The process began before the JVM's own clock (to within two clock ticks of 10 ms), and not long before it.
    assertTrue(ago >= jvmUptimeNanos - 20_000_000L, "process age " + ago + " ns, JVM uptime " + jvmUptimeNanos);
    assertTrue(ago <= jvmUptimeNanos + 60_000_000_000L, "process age " + ago + " ns, JVM uptime " + jvmUptimeNanos);
  }
}
