package dev.thaw.image.restore;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.KernelRef;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * One on-demand restore's timeline: the restore's host phases, each allocation's copies on the restore stream, the
 * launches on the compute stream, the waits the gate queued, and the request's start and end. Device times come from
 * timing events, placed on the host clock through an origin event recorded on the idle restore stream when the
 * restore began. {@link #writeChromeTrace} writes it as Chrome-trace JSON, which Perfetto ({@code ui.perfetto.dev})
 * and {@code chrome://tracing} open.
 *
 * <p>The first launch's start is always recorded (one event); every launch's start and end, and the gate's waits, only
 * with {@link OnDemandOptions#setTrace(boolean)}.
 */
public final class RestoreTrace {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final int PID = 1;
  private static final int HOST = 1;
  private static final int RESTORE = 2;
  private static final int COMPUTE = 3;

  /** A launch: its kernel and the events recorded right before it and after it (null until known). */
  private static final class Launch {
    final String kernel;
    final GpuEvent start;
    GpuEvent end;

    Launch(String kernel, GpuEvent start) {
      this.kernel = kernel;
      this.start = start;
    }
  }

  private record Mark(String name, int track, long startNanos, long endNanos) {}

  private final RestoreResources resources;
  private final GpuEvent origin;
  private final long originNanos;
  private final boolean everyLaunch;
  private final List<Launch> launches = new ArrayList<>();
  private final List<Mark> marks = new ArrayList<>();
  private final List<GpuEvent> taken = new ArrayList<>();
  private Residency residency;

  RestoreTrace(RestoreResources resources, boolean everyLaunch, long startNanos) {
    this.resources = resources;
    this.everyLaunch = everyLaunch;
    this.origin = take();
    this.originNanos = System.nanoTime();
    origin.record(resources.stream());
    marks.add(new Mark("restore starts", HOST, startNanos, startNanos));
  }

  void attach(Residency r) {
    this.residency = r;
  }

  private GpuEvent take() {
    GpuEvent e = resources.takeEvent();
    taken.add(e);
    return e;
  }

  // ---- from the gate, on the launching thread ----

  void beforeWaits(GpuStream stream) {
    if (everyLaunch && !launches.isEmpty()) {
      Launch l = launches.get(launches.size() - 1);
      if (l.end == null) {
        l.end = take();
        l.end.record(stream);
      }
    }
  }

  void launching(KernelRef kernel, GpuStream stream) {
    if (everyLaunch || launches.isEmpty()) {
      GpuEvent e = take();
      e.record(stream);
      launches.add(new Launch(kernel.entry(), e));
    }
  }

  void waited(String what) {
    if (!everyLaunch) {
      return;
    }
    long now = System.nanoTime();
    marks.add(new Mark("wait: " + what, COMPUTE, now, now));
  }

  // ---- from the restore and its owner ----

  /** Marks a host phase from {@code startNanos} to {@code endNanos} ({@link System#nanoTime()}). */
  public void span(String name, long startNanos, long endNanos) {
    marks.add(new Mark(name, HOST, startNanos, endNanos));
  }

  /** Marks a moment on the host: e.g. the request's arrival and its response. */
  public void instant(String name) {
    long now = System.nanoTime();
    marks.add(new Mark(name, HOST, now, now));
  }

  /** Closes the last launch with an event on {@code stream}. */
  void finish(GpuStream stream) {
    beforeWaits(stream);
  }

  /** The host's clock at the origin event. */
  long originNanos() {
    return originNanos;
  }

  GpuEvent origin() {
    return origin;
  }

  /**
   * When the first launch started, in {@link System#nanoTime()} terms; -1 when nothing was launched. Its event must
   * have completed (after the request's last synchronize it has).
   */
  public long firstLaunchNanos() {
    return launches.isEmpty() ? -1 : deviceNanos(launches.get(0).start);
  }

  private long deviceNanos(GpuEvent e) {
    return originNanos + (long) (e.elapsedMillisSince(origin) * 1e6);
  }

  /**
   * Writes the timeline as Chrome-trace JSON, every copy and launch, timestamps from the origin event. Every event in
   * it must have completed: call after the restore is resident and the request's work is done.
   */
  public void writeChromeTrace(Path file) throws IOException {
    ObjectNode root = chromeTrace(originNanos, Integer.MAX_VALUE);
    Files.createDirectories(file.toAbsolutePath().getParent());
    JSON.writerWithDefaultPrettyPrinter().writeValue(file.toFile(), root);
  }

  /**
   * The timeline as Chrome trace, {@code {"traceEvents": [...], "displayTimeUnit": "ms"}}, timestamps in
   * microseconds from {@code zeroNanos} ({@link System#nanoTime()}), bounded: at most {@code maxSpans} spans on the
   * restore stream's row and {@code maxSpans} launches. Where more copies were queued, runs of consecutive ones
   * (in queue order) become one span each, named {@code "copies i-j of n"} with their bytes, count, first and
   * last allocation in {@code args}; an instant at the row's start says how many were coalesced into how many.
   * Launches beyond the cap are left out, likewise said. Every event in it must have completed: call after the
   * restore is resident and the request's work is done.
   */
  public ObjectNode chromeTrace(long zeroNanos, int maxSpans) {
    if (maxSpans < 1) {
      throw new IllegalArgumentException("maxSpans must be at least 1: " + maxSpans);
    }
    ObjectNode root = JSON.createObjectNode();
    root.put("displayTimeUnit", "ms");
    ArrayNode ev = root.putArray("traceEvents");
    thread(ev, HOST, "host: restore and request");
    thread(ev, RESTORE, "restore stream: copies");
    thread(ev, COMPUTE, "compute stream: kernels and waits");
    for (Mark m : marks) {
      if (m.endNanos() == m.startNanos()) {
        ObjectNode i = event(ev, m.name(), "i", m.track(), m.startNanos() - zeroNanos);
        i.put("s", "t");
      } else {
        event(ev, m.name(), "X", m.track(), m.startNanos() - zeroNanos)
            .put("dur", micros(m.endNanos() - m.startNanos()));
      }
    }
    if (residency != null) {
      // Host instants: a first copy that starts late on the device row was queued late, or waited on the device.
      hostInstant(ev, "restore thread starts", residency.pumpStartNanos(), zeroNanos);
      hostInstant(ev, "first copy call", residency.firstCopyNanos(), zeroNanos);
      hostInstant(ev, "first copies queued", residency.firstQueuedNanos(), zeroNanos);
      copies(ev, zeroNanos, maxSpans);
    }
    int kept = Math.min(launches.size(), maxSpans);
    for (int k = 0; k < kept; k++) {
      Launch l = launches.get(k);
      long start = deviceNanos(l.start);
      ObjectNode x = event(ev, l.kernel, "X", COMPUTE, start - zeroNanos);
      x.put("dur", l.end == null ? 0 : micros(deviceNanos(l.end) - start));
    }
    if (kept < launches.size()) {
      ObjectNode i = event(ev, "launches after the first " + kept + " of " + launches.size() + " left out", "i", COMPUTE,
          deviceNanos(launches.get(kept - 1).start) - zeroNanos);
      i.put("s", "t");
    }
    return root;
  }

  /** Each queued copy's span on the restore stream, from when it could start to its event; coalesced to the cap. */
  private void copies(ArrayNode ev, long zeroNanos, int maxSpans) {
    RestorePlan plan = residency.plan();
    List<Integer> queued = new ArrayList<>();
    for (int u = 0; u < plan.unitCount(); u++) {
      if (residency.event(u) != null) {
        queued.add(u);
      }
    }
    queued.sort(Comparator.comparingLong(residency::queuedNanos));
    int n = queued.size();
    long[] starts = new long[n];
    long[] ends = new long[n];
    long previousEnd = Long.MIN_VALUE;
    for (int k = 0; k < n; k++) {
      int u = queued.get(k);
      long end = deviceNanos(residency.event(u));
      // The stream runs copies in order: one starts when it was queued or when the one before it ended.
      starts[k] = Math.min(Math.max(previousEnd, residency.queuedNanos(u)), end);
      ends[k] = end;
      previousEnd = end;
    }
    int per = n <= maxSpans ? 1 : (n + maxSpans - 1) / maxSpans;
    if (per > 1) {
      ObjectNode i = event(ev, n + " copies coalesced into " + ((n + per - 1) / per) + " spans of up to " + per,
          "i", RESTORE, starts[0] - zeroNanos);
      i.put("s", "t");
      i.putObject("args").put("copies", n).put("maxSpans", maxSpans);
    }
    for (int k = 0; k < n; k += per) {
      int last = Math.min(n, k + per) - 1;
      long bytes = 0;
      for (int j = k; j <= last; j++) {
        bytes += plan.unit(queued.get(j)).size();
      }
      String name = per == 1 ? plan.unit(queued.get(k)).name() : "copies " + (k + 1) + "-" + (last + 1) + " of " + n;
      ObjectNode x = event(ev, name, "X", RESTORE, starts[k] - zeroNanos);
      x.put("dur", micros(Math.max(0, ends[last] - starts[k])));
      ObjectNode args = x.putObject("args").put("bytes", bytes);
      if (per > 1) {
        args.put("copies", last - k + 1).put("first", plan.unit(queued.get(k)).name())
            .put("last", plan.unit(queued.get(last)).name());
      }
    }
  }

  /** An event at {@code sinceZeroNanos} from the trace's time zero. */
  /** An instant on the host row at {@code nanos}, if it happened (not 0). */
  private void hostInstant(ArrayNode ev, String name, long nanos, long zeroNanos) {
    if (nanos != 0) {
      event(ev, name, "i", HOST, nanos - zeroNanos).put("s", "t");
    }
  }

  private ObjectNode event(ArrayNode ev, String name, String phase, int track, long sinceZeroNanos) {
    ObjectNode e = ev.addObject();
    e.put("name", name);
    e.put("ph", phase);
    e.put("pid", PID);
    e.put("tid", track);
    e.put("ts", micros(sinceZeroNanos));
    return e;
  }

  private static void thread(ArrayNode ev, int tid, String name) {
    ObjectNode m = ev.addObject();
    m.put("name", "thread_name");
    m.put("ph", "M");
    m.put("pid", PID);
    m.put("tid", tid);
    m.putObject("args").put("name", name);
  }

  private static double micros(long nanos) {
    return nanos / 1e3;
  }

  /** Gives the trace's events back to the pool; the trace cannot be written after. */
  void release() {
    resources.giveBack(taken);
    taken.clear();
  }
}
