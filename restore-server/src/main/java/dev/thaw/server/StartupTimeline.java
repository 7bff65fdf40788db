package dev.thaw.server;

import dev.thaw.pool.WorkerStart;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

/**
 * Where a {@code thaw serve} process spent its way from its own start to its first response: what a Knative pod's
 * scale-from-zero costs in contract mode. Events are milliseconds since the process began ({@link
 * #sinceProcessStart()}, so the launcher and the JVM's own start count), marked by whoever reaches
 * them, on any thread; the first instance's start adds where its worker's start-up went ({@link WorkerStart}'s
 * phases) and its BECOME's phases. {@link #firstResponse} makes the one line the server logs, once.
 *
 * <p>Events that run in parallel (the driver opened on its own thread while the store opens) are marked where each
 * ends, so the line reads in time order and the gaps between events are not phases.
 */
public final class StartupTimeline {

  /** One point on the way: {@code atMillis} since the process began. */
  public record Event(String name, double atMillis) {}

  private final long originNanos;
  private final List<Event> events = new ArrayList<>();
  private final AtomicBoolean reported = new AtomicBoolean();
  private Map<String, Double> workerPhases;
  private double workerSpawnToReadyMillis = -1;
  private Map<String, Double> startPhases;
  private String firstLine;

  private StartupTimeline(long originNanos) {
    this.originNanos = originNanos;
  }

  /**
   * A timeline whose zero is this process's start, or now when unknown. On Linux the start comes from the kernel's
   * own count since boot ({@code /proc/self/stat}'s start time in clock ticks against {@code /proc/uptime}), good to
   * a few clock ticks; {@link ProcessHandle.Info#startInstant()} adds the boot time, which Linux gives in whole
   * seconds, so it may be up to a second early, which would show as a second of {@code main} that never ran.
   */
  public static StartupTimeline sinceProcessStart() {
    long now = System.nanoTime();
    long ago = sinceBootAgo().orElseGet(() -> ProcessHandle.current().info().startInstant()
        .map(s -> Duration.between(s, Instant.now()).toNanos()).orElse(0L));
    return new StartupTimeline(now - Math.max(0, ago));
  }

  /** Clock ticks per second of {@code /proc/self/stat}'s times ({@code USER_HZ}: 100 on every Linux ABI). */
  private static final int USER_HZ = 100;

  /** Nanoseconds since this process started, from {@code /proc}; empty where that cannot be read. */
  static Optional<Long> sinceBootAgo() {
    try {
      String stat = Files.readString(Path.of("/proc/self/stat"));
      // Field 22, counted after the command name's closing parenthesis (the name may hold spaces).
      String[] f = stat.substring(stat.lastIndexOf(')') + 2).trim().split(" ");
      long startTicks = Long.parseLong(f[19]);
      String uptime = Files.readString(Path.of("/proc/uptime")).trim().split(" ")[0];
      double upSeconds = Double.parseDouble(uptime);
      long ago = Math.round((upSeconds - (double) startTicks / USER_HZ) * 1e9);
      return ago >= 0 ? Optional.of(ago) : Optional.empty();
    } catch (IOException | RuntimeException e) {
      return Optional.empty();
    }
  }

  /** A timeline whose zero is {@code originNanos} on the {@link System#nanoTime()} clock. */
  public static StartupTimeline since(long originNanos) {
    return new StartupTimeline(originNanos);
  }

  /** Marks {@code name} now. */
  public void mark(String name) {
    markAt(name, System.nanoTime());
  }

  /** Marks {@code name} at {@code nanos} on the {@link System#nanoTime()} clock. */
  public synchronized void markAt(String name, long nanos) {
    events.add(new Event(name, millis(nanos)));
  }

  /** Milliseconds from the process start to {@code nanos}. */
  public double millis(long nanos) {
    return (nanos - originNanos) / 1e6;
  }

  /**
   * The first instance started: its worker's start-up (null in process) and its start's phases, at most once
   * (later starts are not on the way to the first response).
   */
  public synchronized void instanceStarted(WorkerStart worker, Map<String, Double> phases) {
    if (startPhases != null) {
      return;
    }
    events.add(new Event("instance started", millis(System.nanoTime())));
    if (worker != null) {
      if (worker.readyNanos() != 0) {
        double ready = millis(worker.readyNanos());
        events.add(new Event("worker spawned", ready - worker.spawnToReadyMillis()));
        events.add(new Event("worker ready", ready));
      }
      workerPhases = new LinkedHashMap<>(worker.phases());
      workerSpawnToReadyMillis = worker.spawnToReadyMillis();
    }
    startPhases = new LinkedHashMap<>(phases);
  }

  /** The events so far, in the order they were marked. */
  public synchronized List<Event> events() {
    return List.copyOf(events);
  }

  /**
   * Marks the first response and returns the line that tells the whole way to it; empty after the first call.
   *
   * @param function the function that answered
   * @param requestPhases the first request's own phases (queue, acquire, map, restore-wait, invoke)
   */
  public Optional<String> firstResponse(String function, Map<String, Double> requestPhases) {
    if (!reported.compareAndSet(false, true)) {
      return Optional.empty();
    }
    long now = System.nanoTime();
    synchronized (this) {
      events.add(new Event("first response", millis(now)));
      StringBuilder line = new StringBuilder();
      line.append(String.format(Locale.ROOT, "startup %.1f ms from process start to first response (%s); at ms: ",
          millis(now), function));
      line.append(events.stream().sorted((a, b) -> Double.compare(a.atMillis(), b.atMillis()))
          .map(e -> String.format(Locale.ROOT, "%s %.1f", e.name(), e.atMillis()))
          .collect(Collectors.joining(", ")));
      if (workerPhases != null) {
        line.append(String.format(Locale.ROOT, "; worker spawn to ready %.1f ms:", workerSpawnToReadyMillis));
        appendPhases(line, workerPhases);
      }
      if (startPhases != null) {
        line.append("; instance start ms:");
        appendPhases(line, startPhases);
      }
      line.append("; first request ms:");
      appendPhases(line, requestPhases);
      firstLine = line.toString();
      return Optional.of(firstLine);
    }
  }

  /** The line {@link #firstResponse} made, or null before the first response. */
  public synchronized String line() {
    return firstLine;
  }

  private static void appendPhases(StringBuilder line, Map<String, Double> phases) {
    phases.forEach((k, v) -> line.append(String.format(Locale.ROOT, " %s %.1f", k, v)));
  }
}
