package dev.thaw.bench.server;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * What the threads of this process and of its children (a pool's workers) did over a series of requests, from
 * Linux's {@code /proc/<pid>/task/<tid>/}: time on a CPU and time runnable but waiting for one ({@code schedstat},
 * nanoseconds), and how often each went to sleep ({@code voluntary_ctxt_switches} in {@code status}: its wake-ups).
 * Threads are grouped by name as the kernel keeps it (15 characters: {@code vert.x-eventloo}), a child's prefixed
 * with {@code worker:}. Per request, it says whether a slower request does more work, waits longer for a core, or
 * does the same work more slowly. Empty where there is no {@code /proc} (not Linux).
 */
final class ThreadUsage {

  /** Groups below this many wake-ups and this much CPU per request are left out of the report. */
  private static final double MIN_WAKES = 0.2;
  private static final double MIN_CPU_MICROS = 5;

  /** Per group: CPU ns, run-queue ns, voluntary switches. */
  private final Map<String, long[]> groups;

  private ThreadUsage(Map<String, long[]> groups) {
    this.groups = groups;
  }

  static ThreadUsage now() {
    Map<String, long[]> groups = new TreeMap<>();
    ProcessHandle self = ProcessHandle.current();
    read(self.pid(), "", groups);
    try (Stream<ProcessHandle> children = self.descendants()) {
      for (ProcessHandle child : children.toList()) {
        read(child.pid(), "worker:", groups);
      }
    }
    return new ThreadUsage(groups);
  }

  private static void read(long pid, String prefix, Map<String, long[]> groups) {
    List<Path> tasks;
    try (Stream<Path> s = Files.list(Path.of("/proc", Long.toString(pid), "task"))) {
      tasks = s.toList();
    } catch (IOException | UncheckedIOException e) {
      return;
    }
    for (Path task : tasks) {
      try {
        String name = prefix + Files.readString(task.resolve("comm")).strip();
        String[] sched = Files.readString(task.resolve("schedstat")).trim().split("\\s+");
        long switches = 0;
        for (String line : Files.readAllLines(task.resolve("status"))) {
          if (line.startsWith("voluntary_ctxt_switches:")) {
            switches = Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
          }
        }
        long[] g = groups.computeIfAbsent(name, k -> new long[3]);
        g[0] += Long.parseLong(sched[0]);
        g[1] += Long.parseLong(sched[1]);
        g[2] += switches;
      } catch (IOException | RuntimeException e) {
        // The thread ended while it was read: it is left out.
      }
    }
  }

  /**
   * Per request since {@code before}: {@code {group: {"cpuMicros", "runQueueMicros", "wakes"}}}, busy groups only.
   * A thread that ended in between is left out; one started in between counts from zero.
   */
  ObjectNode perRequestSince(ThreadUsage before, int requests) {
    ObjectNode o = ServerOverhead.JSON.createObjectNode();
    groups.forEach((name, now) -> {
      long[] then = before.groups.getOrDefault(name, new long[3]);
      double cpu = (now[0] - then[0]) / 1e3 / requests;
      double queue = (now[1] - then[1]) / 1e3 / requests;
      double wakes = (now[2] - then[2]) / (double) requests;
      if (cpu >= MIN_CPU_MICROS || wakes >= MIN_WAKES) {
        o.putObject(name).put("cpuMicros", round(cpu)).put("runQueueMicros", round(queue)).put("wakes", round(wakes));
      }
    });
    return o;
  }

  private static double round(double v) {
    return Math.round(v * 100) / 100.0;
  }
}
