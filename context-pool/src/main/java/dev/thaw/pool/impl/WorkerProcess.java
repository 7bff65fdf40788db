package dev.thaw.pool.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PoolException;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.RankImage;
import dev.thaw.pool.RestoreCompletion;
import dev.thaw.pool.Worker;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.WorkerException;
import dev.thaw.pool.WorkerLostException;
import dev.thaw.pool.WorkerStart;
import dev.thaw.pool.WorkerStatus;
import dev.thaw.pool.WorkerTimeline;
import dev.thaw.pool.cache.CacheLease;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.WorkerMessages.Become;
import dev.thaw.pool.protocol.WorkerMessages.BecomeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Export;
import dev.thaw.pool.protocol.WorkerMessages.ExportAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Invoke;
import dev.thaw.pool.protocol.WorkerMessages.InvokeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Ready;
import dev.thaw.pool.protocol.WorkerMessages.Recycle;
import dev.thaw.pool.protocol.WorkerMessages.RecycleAnswer;
import dev.thaw.pool.protocol.WorkerMessages.BecomeGroup;
import dev.thaw.pool.protocol.WorkerMessages.GroupRank;
import dev.thaw.pool.protocol.WorkerMessages.Resident;
import dev.thaw.pool.protocol.WorkerMessages.Source;
import dev.thaw.pool.protocol.WorkerMessages.Status;
import dev.thaw.pool.protocol.WorkerMessages.StatusAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Trace;
import dev.thaw.pool.protocol.WorkerMessages.TraceAnswer;
import dev.thaw.pool.worker.WorkerConfig;
import dev.thaw.runtime.function.ResponseStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The parent's side of one worker process: its life (ready, blank, became an image, ended), what it holds prepared
 * ({@link WorkerPrepares}) and its requests, over its {@link WorkerPipe}. Every way a worker can fail ends in
 * {@link #lose}: the process is killed, every pending operation fails with the same {@link WorkerException}, and
 * the pool is told once.
 */
final class WorkerProcess implements Worker {

  /** What the pool hears from a worker. */
  interface Listener {
    void ready(WorkerProcess w);

    /** A worker that said READY before its warm-up has finished it ({@link #warm()} is true now). */
    void warmed(WorkerProcess w);

    /** The worker ended: lost (crashed, hung, broken, evicted) or retired after use. */
    void ended(WorkerProcess w, WorkerException why, boolean lost);

    /** The worker never became an image and goes back to the idle set. */
    void returned(WorkerProcess w);

    /** The worker dropped the image it became and is blank again ({@link ContextPoolOptions#recycleLimit()}). */
    void recycled(WorkerProcess w);
  }

  /** Loaded at first use, after the spawn: a server's first worker starts before Jackson has loaded anywhere. */
  private static final class Json {
    static final ObjectMapper MAPPER = FrameCodec.json();
  }

  private static final Duration STATUS_TIMEOUT = Duration.ofSeconds(10);
  private static final Logger LOG = LoggerFactory.getLogger(WorkerProcess.class);

  private final int device;
  private final Process process;
  private final long pid;
  private final long spawnNanos;
  private final Path log;
  private final ContextPoolOptions options;
  /** {@link ContextPoolOptions#wakeAhead()}, read once: every invoke asks for it. */
  private final long wakeAheadNanos;
  private final ScheduledExecutorService timer;
  private final Listener listener;
  private final WorkerPipe pipe;
  private final WorkerPrepares prepares;

  private final CompletableFuture<WorkerStart> ready = new CompletableFuture<>();
  /** The current image's residency: made anew by each BECOME after the first. */
  private volatile CompletableFuture<RestoreCompletion> resident = new CompletableFuture<>();
  private final CompletableFuture<WorkerException> endedFuture = new CompletableFuture<>();
  /**
   * The host cache leases of the image this worker restores (one per rank of a group): held until the restore is
   * complete or the worker ends.
   */
  private final AtomicReference<List<CacheLease>> leases = new AtomicReference<>(List.of());
  /** Set when this worker became a group (BECOME_GROUP): it holds contexts on other devices and is never recycled. */
  private volatile boolean group;
  /** A BECOME or an export runs: nothing else may be sent. */
  private final AtomicBoolean busy = new AtomicBoolean();
  /** Requests sent and not yet answered (they may overlap each other, never a BECOME or an export). */
  private final AtomicInteger invoking = new AtomicInteger();
  private final AtomicReference<WorkerException> ended = new AtomicReference<>();
  private volatile boolean becameAnImage;
  /** Set when a BECOME succeeded: only then may requests be sent. */
  private volatile boolean invocable;
  private volatile String image;
  private volatile boolean warm;
  /** The start as the second READY (warm) told it, or null. */
  private volatile WorkerStart warmStart;
  /** The devices it holds helper links to, every READY's together (links close only after it became an image). */
  private volatile List<Integer> helperLinks = List.of();
  /** The worker's recent invokes (decode, function, encode), smoothed: the wake-ahead's prediction; 0: none yet. */
  private volatile long invokeNanos;
  /** Images this worker dropped and became blank again after (its RECYCLEs), as the last one's answer said. */
  private volatile int imagesBefore;
  /** The HBM tier took the slabs of this image's EXPORT ({@link #exportKept()}). */
  private volatile boolean exportKept;

  private WorkerProcess(int device, Process process, long spawnNanos, Path log, ContextPoolOptions options,
      ScheduledExecutorService timer, Executor io, Listener listener) {
    this.device = device;
    this.process = process;
    this.pid = process.pid();
    this.spawnNanos = spawnNanos;
    this.log = log;
    this.options = options;
    this.wakeAheadNanos = options.wakeAhead().toNanos();
    this.timer = timer;
    this.listener = listener;
    this.pipe = new WorkerPipe(process, options.maxFrameBytes(), options.wakeAhead(), timer, io, new Reports());
    this.prepares = new WorkerPrepares(pipe, pid, device, options.devices(), options.maxPreparedImages(),
        options.becomeTimeout());
  }

  /**
   * Starts a worker process, or takes over the one {@link Prelaunch} started for a pool like this one (its config then
   * goes as the first line of its stdin); READY arrives later through {@link Listener#ready}.
   */
  static WorkerProcess spawn(ContextPoolOptions o, int device, Path log, ScheduledExecutorService timer, Executor io,
      Listener listener) throws IOException {
    Prelaunch.Early early = Prelaunch.take(o);
    long spawnNanos = early != null ? early.spawnNanos() : System.nanoTime();
    WorkerConfig config = new WorkerConfig(o.deviceChoice(), device,
        o.storePath() == null ? null : o.storePath().toString(), o.warmupLaunches(), o.warmupImage(),
        o.hostCachePath() == null ? null : o.hostCachePath().toString(), o.maxFrameBytes(),
        ProcessHandle.current().pid(), spawnNanos, o.warmupAfterReady(),
        o.storePath() == null ? List.of() : o.prepareAtStart(), o.protectAfterIdle().toMillis(), o.helperLinks(),
        o.helperSlotBytes(), o.helperMinFreeBytes());
    Process p;
    if (early != null) {
      p = early.process();
      log = adoptLog(early.log(), log);
    } else {
      List<String> command = new ArrayList<>(Prelaunch.command(o));
      command.add(config.toJson());
      p = Prelaunch.builder(command, o, log).start();
    }
    WorkerProcess w = new WorkerProcess(device, p, spawnNanos, log, o, timer, io, listener);
    if (early != null) {
      try {
        w.pipe.writeConfigLine(config.toJson());
      } catch (IOException e) {
        p.destroyForcibly();
        throw new IOException("the prelaunched worker " + p.pid() + " took no config: " + e.getMessage(), e);
      }
    }
    w.pipe.startReading("thaw-pool-worker-" + w.pid);
    long startMs = o.startTimeout().toMillis();
    timer.schedule(() -> {
      if (!w.ready.isDone()) {
        w.lose(WorkerErrorKind.DEADLINE, null, "not ready " + startMs + " ms after spawn; killed");
      }
    }, startMs, TimeUnit.MILLISECONDS);
    return w;
  }

  /** Moves the prelaunched worker's log where the pool keeps its workers' logs; where it cannot, it stays. */
  private static Path adoptLog(Path from, Path to) {
    try {
      return Files.move(from, to);
    } catch (IOException | RuntimeException e) {
      return from;
    }
  }

  // ---- Worker ----

  @Override
  public long pid() {
    return pid;
  }

  @Override
  public int device() {
    return device;
  }

  @Override
  public WorkerStart start() {
    WorkerStart warmed = warmStart;
    return warmed != null ? warmed : ready.getNow(null);
  }

  /**
   * True once the worker has warmed up: at READY for a worker that warms up first, at its second READY for one that
   * warms up after READY ({@link ContextPoolOptions#warmupAfterReady()}); never for one whose warm-up a request cut
   * short.
   */
  boolean warm() {
    return warm;
  }

  CompletableFuture<WorkerStart> ready() {
    return ready;
  }

  @Override
  public List<Integer> helperLinks() {
    return helperLinks;
  }

  @Override
  public String image() {
    return image;
  }

  @Override
  public boolean isAlive() {
    return ended.get() == null && process.isAlive();
  }

  @Override
  public CompletableFuture<WorkerException> ended() {
    return endedFuture;
  }

  /** Why the worker ended, or null while it lives. */
  WorkerException endedBy() {
    return ended.get();
  }

  Process process() {
    return process;
  }

  Path log() {
    return log;
  }

  /** The end of the worker's stderr, for messages. */
  String logTail() {
    return WorkerLogs.tail(log);
  }

  // ---- preparing ----

  /**
   * Sends PREPARE for {@code image} unless this worker became an image, ended or has it already. Not a claim: the
   * worker prepares while blank, before whatever is sent after.
   */
  void prepare(PreparedImage image) {
    if (!becameAnImage && ended.get() == null) {
      prepares.prepare(image);
    }
  }

  /** Has the worker drop these prepared images (they fell out of what the pool prepares ahead). */
  void forget(Collection<String> keys) {
    if (!becameAnImage && ended.get() == null) {
      prepares.forget(keys);
    }
  }

  /** PREPAREs sent to this worker and not yet answered. */
  int preparing() {
    return prepares.pending();
  }

  /** The keys this worker holds prepared, as far as the parent knows. */
  Set<String> preparedKeys() {
    return prepares.keys();
  }

  /** Waits up to {@code nanos} for every PREPARE sent so far to be answered; false if one is still running. */
  boolean awaitPrepares(long nanos) throws InterruptedException {
    return prepares.awaitAll(nanos);
  }

  // ---- becoming ----

  @Override
  public CompletableFuture<BecomeResult> become(String name, byte[] manifest, ImageSource source) {
    return become(name, null, manifest, source, CompletableFuture.completedFuture(false));
  }

  @Override
  public BecomeResult becomeBlocking(String name, byte[] manifest, ImageSource source) {
    return join(become(name, manifest, source));
  }

  @Override
  public CompletableFuture<BecomeResult> become(PreparedImage image, ImageSource source) {
    return become(image.name(), image.key(), image.manifest(), source, prepares.isPrepared(image.key()));
  }

  @Override
  public BecomeResult becomeBlocking(PreparedImage image, ImageSource source) {
    return join(become(image, source));
  }

  /**
   * Claims the worker for {@code name} now, then, once {@code isPrepared} says, sends a BECOME naming the prepared
   * {@code key} (no manifest) or carrying {@code manifest} whole; the placement follows either. A worker that no
   * longer holds the key answers NOT_PREPARED, still blank, and gets the image whole.
   */
  private CompletableFuture<BecomeResult> become(String name, String key, byte[] manifest, ImageSource source,
      CompletableFuture<Boolean> isPrepared) {
    checkUsable();
    if (becameAnImage) {
      throw new IllegalStateException("worker " + pid + " already became '" + image + "'; a worker becomes one "
          + "image in its life");
    }
    claim();
    if (imagesBefore > 0) {
      resident = new CompletableFuture<>();
    }
    becameAnImage = true;
    image = name;
    if (source.lease() != null) {
      leases.set(List.of(source.lease()));
    }
    long claimed = System.nanoTime();
    long[] sent = new long[1];
    return release(isPrepared.thenCompose(named -> {
      sent[0] = System.nanoTime();
      CompletableFuture<Frame> answer = sendBecome(name, named ? key : null, manifest, source);
      if (!named) {
        return answer;
      }
      return answer.handle((f, e) -> f != null ? CompletableFuture.completedFuture(f)
          : notPrepared(e) ? sendBecome(name, null, manifest, source) : CompletableFuture.<Frame>failedFuture(e))
          .thenCompose(f -> f);
    }).thenApply(f -> became(name, f, claimed, sent[0])));
  }

  @Override
  public CompletableFuture<BecomeResult> becomeGroup(String name, List<RankImage> ranks, PreparedImage prepared) {
    checkUsable();
    if (ranks.size() < 2) {
      throw new IllegalArgumentException("a group has two ranks or more, not " + ranks.size());
    }
    if (ranks.get(0).device() != device) {
      throw new IllegalArgumentException("rank 0 goes to device " + ranks.get(0).device() + ", and worker " + pid
          + " runs on " + device);
    }
    if (ranks.stream().map(RankImage::device).distinct().count() != ranks.size()) {
      throw new IllegalArgumentException("two ranks share a device: " + ranks.stream().map(RankImage::device)
          .toList());
    }
    if (becameAnImage) {
      throw new IllegalStateException("worker " + pid + " already became '" + image + "'; a worker becomes one "
          + "image in its life");
    }
    claim();
    if (imagesBefore > 0) {
      resident = new CompletableFuture<>();
    }
    becameAnImage = true;
    group = true;
    image = name;
    List<CacheLease> held = new ArrayList<>();
    // Whole (every rank's manifest and placement), and as a worker that prepared the group takes it (placements
    // alone: it holds the manifests).
    List<GroupRank> heads = new ArrayList<>();
    List<GroupRank> lightHeads = new ArrayList<>();
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    ByteArrayOutputStream light = new ByteArrayOutputStream();
    for (RankImage r : ranks) {
      ImageSource source = r.source();
      if (source.lease() != null) {
        held.add(source.lease());
      }
      byte[] placement = source.placement() == null ? new byte[0] : source.placement().toBytes();
      Source s = Source.of(source);
      heads.add(new GroupRank(r.tag(), r.device(), s, r.manifest().length, placement.length));
      lightHeads.add(new GroupRank(r.tag(), r.device(), s, 0, placement.length));
      body.writeBytes(r.manifest());
      body.writeBytes(placement);
      light.writeBytes(placement);
    }
    leases.set(List.copyOf(held));
    // Named only where the worker prepared the group for these very devices (each rank's context is made there).
    int[] preparedFor = prepared == null ? null : prepares.preparedDevices(prepared.key());
    boolean devicesAsPrepared = preparedFor != null
        && Arrays.equals(preparedFor, ranks.stream().mapToInt(RankImage::device).toArray());
    CompletableFuture<Boolean> named = devicesAsPrepared ? prepares.isPrepared(prepared.key())
        : CompletableFuture.completedFuture(false);
    long claimed = System.nanoTime();
    long[] sent = new long[1];
    byte[] bytes = body.toByteArray();
    return release(named.thenCompose(isNamed -> {
      sent[0] = System.nanoTime();
      CompletableFuture<Frame> answer = isNamed
          ? pipe.send(new BecomeGroup(name, lightHeads, options.awaitResident(), prepared.key()), light.toByteArray(),
              options.becomeTimeout())
          : pipe.send(new BecomeGroup(name, heads, options.awaitResident(), null), bytes, options.becomeTimeout());
      if (!isNamed) {
        return answer;
      }
      return answer.handle((f, e) -> f != null ? CompletableFuture.completedFuture(f) : notPrepared(e)
          ? pipe.send(new BecomeGroup(name, heads, options.awaitResident(), null), bytes, options.becomeTimeout())
          : CompletableFuture.<Frame>failedFuture(e)).thenCompose(f -> f);
    }).thenApply(f -> became(name, f, claimed, sent[0])));
  }

  @Override
  public BecomeResult becomeGroupBlocking(String name, List<RankImage> ranks, PreparedImage prepared) {
    return join(becomeGroup(name, ranks, prepared));
  }

  private static boolean notPrepared(Throwable e) {
    Throwable c = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
    return c instanceof WorkerException w && w.kind() == WorkerErrorKind.NOT_PREPARED;
  }

  /** A BECOME naming the prepared {@code key}, or, with a null key, carrying the manifest. */
  private CompletableFuture<Frame> sendBecome(String name, String key, byte[] manifest, ImageSource source) {
    byte[] placement = source.placement() == null ? new byte[0] : source.placement().toBytes();
    boolean placementPrepared = key != null && prepares.placementHolds(key, source.placement());
    byte[] body = key == null ? WorkerPrepares.concat(manifest, placement) : placementPrepared ? null : placement;
    Become head = new Become(name, Source.of(source), key == null ? manifest.length : 0, options.awaitResident(),
        key, placementPrepared);
    return pipe.send(head, body, options.becomeTimeout());
  }

  private BecomeResult became(String name, Frame f, long claimedNanos, long sentNanos) {
    long read = System.nanoTime();
    BecomeAnswer a = BecomeAnswer.from(f.head());
    invocable = true;
    return new BecomeResult(name, a.source(), a.helpers(), a.phases(), a.bytes(), millisSince(claimedNanos),
        (sentNanos - claimedNanos) / 1e6, a.totalEndNanos() == 0 ? Double.NaN : (read - a.totalEndNanos()) / 1e6,
        a.totalEndNanos() == 0 || a.sentNanos() == 0 ? Double.NaN : (a.sentNanos() - a.totalEndNanos()) / 1e6);
  }

  @Override
  public CompletableFuture<RestoreCompletion> resident() {
    return resident;
  }

  // ---- invoking ----

  @Override
  public CompletableFuture<InvokeResult> invoke(byte[] json, ByteBuffer binary, Duration deadline) {
    return invoke(json, binary, deadline, null);
  }

  /** A request; with a {@code stream}, its parts (when streamed) go there and its cancel sends CANCEL. */
  @Override
  public CompletableFuture<InvokeResult> invoke(byte[] json, ByteBuffer binary, Duration deadline,
      ResponseStream stream) {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + (becameAnImage ? " did not become '" + image + "' (its "
          + "BECOME failed or has not answered)" : " has not become an image"));
    }
    claimInvoke();
    byte[] body = json;
    if (binary != null && binary.hasRemaining()) {
      ByteBuffer b = binary.duplicate();
      body = Arrays.copyOf(json, json.length + b.remaining());
      b.get(body, json.length, b.remaining());
    }
    long t = System.nanoTime();
    boolean streamed = stream != null && stream.streamed();
    // A streamed request's end is its last part's business: no NEAR (the reader is awake for its parts anyway).
    Invoke head = new Invoke(json.length, streamed ? 0 : nearMicros(), streamed);
    WorkerPipe.Streamed sent = pipe.sendStreamed(head, body, deadline == null ? options.invokeTimeout() : deadline,
        streamed ? bytes -> stream.part(parsePart(bytes)) : null);
    if (stream != null) {
      stream.onCancel(() -> pipe.cancel(sent.id()));
    }
    return sent.answer().whenComplete((r, e) -> invoking.decrementAndGet()).thenApply(f -> {
      InvokeAnswer a = InvokeAnswer.from(f.head(), f.body().length);
      int n = a.jsonBytes();
      byte[] responseJson = n == f.body().length ? f.body() : Arrays.copyOf(f.body(), n);
      ByteBuffer rest = ByteBuffer.wrap(f.body(), n, f.body().length - n).slice().asReadOnlyBuffer();
      if (!streamed) {
        learnInvoke(a.phases());
      }
      return new InvokeResult(responseJson, rest, a.phases(), millisSince(t));
    });
  }

  /** A PART's body as JSON; one that is not is the worker's fault: it is lost. */
  private JsonNode parsePart(byte[] body) {
    try {
      return Json.MAPPER.readTree(body);
    } catch (IOException e) {
      lose(WorkerErrorKind.PROTOCOL, null, "a PART that is not JSON (" + e.getMessage() + "); killed");
      return Json.MAPPER.nullNode();
    }
  }

  /**
   * When the worker should say NEAR, in microseconds after it began the invoke: its predicted length less the
   * wake-ahead, for invokes predicted to last at least 1 ms and twice the wake-ahead; 0 for none.
   */
  long nearMicros() {
    long ahead = wakeAheadNanos;
    long predicted = invokeNanos;
    if (ahead == 0 || predicted < Math.max(1_000_000, 2 * ahead)) {
      return 0;
    }
    return (predicted - ahead) / 1000;
  }

  /** Folds an invoke's length as the worker measured it into the prediction (a quarter of the way). */
  private void learnInvoke(Map<String, Double> phases) {
    double millis = 0;
    for (double v : phases.values()) {
      millis += v;
    }
    long nanos = (long) (millis * 1e6);
    long before = invokeNanos;
    invokeNanos = before == 0 ? nanos : before + (nanos - before) / 4;
  }

  @Override
  public long[] wakeAheads() {
    return pipe.wakeAheads();
  }

  @Override
  public InvokeResult invokeBlocking(byte[] json, ByteBuffer binary, Duration deadline) {
    return join(invoke(json, binary, deadline));
  }

  // ---- the resident image ----

  @Override
  public CompletableFuture<List<ExportedSlab>> exportReadOnly() {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + " has no image to export");
    }
    claim();
    return release(pipe.send(new Export(), null, STATUS_TIMEOUT)
        .thenApply(f -> ExportedSlab.decodeAll(ExportAnswer.from(f.head()).slabs())));
  }

  @Override
  public void exportKept() {
    exportKept = true;
  }

  @Override
  public CompletableFuture<WorkerTimeline> restoreTimeline(int maxSpans) {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + " has no restore to trace");
    }
    long sent = System.nanoTime();
    // Not claimed: the worker answers it between requests, so it may wait behind one.
    return pipe.send(new Trace(maxSpans), null, options.invokeTimeout().plus(STATUS_TIMEOUT))
        .thenApply(f -> timeline(f, sent, System.nanoTime()));
  }

  /**
   * The worker's trace on this process's clock: one clock per Linux host, unless the worker's {@code nowNanos} falls
   * outside the round trip; then it is placed by the round trip's middle, and the trace says within how much.
   */
  private WorkerTimeline timeline(Frame f, long sent, long received) {
    TraceAnswer a = TraceAnswer.from(f.head());
    boolean shared = a.nowNanos() >= sent && a.nowNanos() <= received;
    long shift = shared ? 0 : sent + (received - sent) / 2 - a.nowNanos();
    try {
      JsonNode trace = Json.MAPPER.readTree(f.body());
      double error = shared ? 0 : (received - sent) / 2e3;
      if (!shared && trace.path("traceEvents").isArray()) {
        ((ArrayNode) trace.get("traceEvents")).addObject()
            .put("name", String.format(Locale.ROOT, "the worker's clock is not this process's: placed by the round "
                + "trip, within %.0f us", error)).put("ph", "i").put("s", "g").put("pid", 1).put("tid", 0)
            .put("ts", 0);
      }
      return new WorkerTimeline(trace, a.originNanos() + shift, shared, error);
    } catch (IOException e) {
      throw new CompletionException(new WorkerException(WorkerErrorKind.PROTOCOL, pid, null,
          "its restore timeline is not JSON: " + e.getMessage()));
    }
  }

  @Override
  public CompletableFuture<WorkerStatus> status() {
    return pipe.send(new Status(), null, STATUS_TIMEOUT).thenApply(f -> {
      StatusAnswer s = StatusAnswer.from(f.head());
      return new WorkerStatus(s.pid(), s.state(), s.image(), s.invocations());
    });
  }

  // ---- ending ----

  @Override
  public void release() {
    if (ended.get() != null) {
      return;
    }
    boolean idle = !busy.get() && invoking.get() == 0 && process.isAlive();
    if (!becameAnImage && idle) {
      listener.returned(this);
    } else if (becameAnImage && invocable && idle && !group && imagesBefore < options.recycleLimit()) {
      recycle();
    } else {
      retire("released after becoming '" + image + "'");
    }
  }

  /**
   * Asks the worker to drop its image (RECYCLE) and hands it back to the pool once it answered that it is blank again;
   * a worker that could not ends as a released one does.
   */
  private void recycle() {
    String was = image;
    try {
      claim();
    } catch (IllegalStateException e) {
      retire("released after becoming '" + was + "' while busy");
      return;
    }
    // A restore still copying is stopped by the worker: its lease on the host cache ends here.
    closeLease();
    pipe.send(new Recycle(exportKept), null, options.recycleTimeout()).whenComplete((f, e) -> {
      if (e != null) {
        Throwable c = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
        LOG.info("Worker {} could not drop '{}'; it exits: {}", pid, was, c.getMessage());
        retire("could not drop '" + was + "': " + c.getMessage());
        return;
      }
      RecycleAnswer a = RecycleAnswer.from(f.head());
      resident.completeExceptionally(new WorkerException(WorkerErrorKind.STATE, pid, null, "'" + was
          + "' was dropped before it was resident"));
      prepares.recycled(a.prepared());
      helperLinks = a.helpers();
      imagesBefore = a.images();
      invokeNanos = 0;
      exportKept = false;
      invocable = false;
      image = null;
      becameAnImage = false;
      busy.set(false);
      LOG.debug("Worker {} dropped '{}': {} bytes scrubbed, {} the HBM tier's, {}", pid, was, a.scrubbedBytes(),
          a.keptBytes(), a.phases());
      listener.recycled(this);
    });
  }

  /** Times this worker dropped an image and became blank again. */
  int imagesBefore() {
    return imagesBefore;
  }

  @Override
  public void evict() {
    lose(WorkerErrorKind.CRASHED, null, "evicted by its holder");
  }

  @Override
  public void close() {
    release();
  }

  /** Asks the worker to exit and kills it if it has not after the grace period. Not a loss. */
  void retire(String why) {
    WorkerException e = new WorkerException(WorkerErrorKind.STATE, pid, null, "worker ended: " + why);
    if (!ended.compareAndSet(null, e)) {
      return;
    }
    pipe.sendExit();
    timer.schedule(process::destroyForcibly, options.exitGrace().toMillis(), TimeUnit.MILLISECONDS);
    failPending(e);
    listener.ended(this, e, false);
  }

  /** Kills the worker now and fails everything pending with one exception of {@code kind}. Idempotent. */
  void lose(WorkerErrorKind kind, String remoteType, String message) {
    // A worker that never started ran no function: its stderr is the JVM's and the driver's, what the operator
    // needs in the pool's start failure. After READY it is the function's, and goes to the log only.
    lose(new WorkerLostException(kind, pid, remoteType, ready.isDone() ? message : message + WorkerLogs.tail(log)));
  }

  private void lose(WorkerException e) {
    if (!ended.compareAndSet(null, e)) {
      return;
    }
    // The worker's own output is the function's: it goes to this process's log, never into a message a client sees.
    LOG.warn("Worker {} on device {} lost: {}{}", pid, device, e.getMessage(), WorkerLogs.tail(log));
    process.destroyForcibly();
    failPending(e);
    listener.ended(this, e, true);
  }

  private void failPending(WorkerException e) {
    ready.completeExceptionally(e);
    resident.completeExceptionally(e);
    closeLease();
    pipe.failAll(e);
    endedFuture.complete(e);
  }

  private void closeLease() {
    for (CacheLease l : leases.getAndSet(List.of())) {
      l.close();
    }
  }

  private void checkUsable() {
    WorkerException e = ended.get();
    if (e != null) {
      throw e instanceof WorkerLostException ? new WorkerLostException(e.kind(), pid, e.remoteType(), e.detail())
          : new IllegalStateException(e.getMessage());
    }
  }

  /** Claims the worker alone, for a BECOME or an export: no request may run. */
  private void claim() {
    if (invoking.get() > 0 || !busy.compareAndSet(false, true)) {
      throw new IllegalStateException("worker " + pid + " is busy: a BECOME or an export runs alone");
    }
  }

  /** A request joins those in flight; none while a BECOME or an export runs. */
  private void claimInvoke() {
    if (busy.get()) {
      throw new IllegalStateException("worker " + pid + " is busy: a BECOME or an export runs");
    }
    invoking.incrementAndGet();
  }

  private <T> CompletableFuture<T> release(CompletableFuture<T> f) {
    return f.whenComplete((r, e) -> busy.set(false));
  }

  /** What the pipe's reader hears that answers no request. */
  private final class Reports implements WorkerPipe.Reports {

    @Override
    public void ready(Ready r) {
      WorkerStart start = new WorkerStart(pid, r.device().driver(), r.device().simulated(), r.device().name(),
          r.phases(), millisSince(spawnNanos), System.nanoTime());
      TreeSet<Integer> links = new TreeSet<>(helperLinks);
      links.addAll(r.helpers());
      helperLinks = List.copyOf(links);
      if (ready.isDone()) {
        if (r.warm() && !warm) {
          warmStart = start;
          warm = true;
          listener.warmed(WorkerProcess.this);
        }
        return;
      }
      warm = r.warm();
      // Images it prepared at start (ContextPoolOptions.prepareAtStart): no PREPARE is sent for those keys.
      prepares.preparedAtStart(r.prepared());
      if (ready.complete(start)) {
        listener.ready(WorkerProcess.this);
      }
    }

    @Override
    public void resident(Resident r) {
      closeLease();
      resident.complete(new RestoreCompletion(r.sinceBecomeMillis(), r.bytes(), r.hostBytes(), r.storeBytes(),
          r.residentBytes(), r.copies(), r.promotions(), r.waits(), r.peerBytes(), r.helperBytes()));
    }

    @Override
    public void failed(int id, Failure f) {
      if (id == 0 || f.kind().workerLost()) {
        lose(f.kind(), f.exceptionType(), f.describe());
        return;
      }
      pipe.fail(id, WorkerException.of(f.kind(), pid, f.exceptionType(), f.describe()));
    }

    @Override
    public void deadline(FrameType type, Duration timeout) {
      lose(WorkerErrorKind.DEADLINE, null, "no answer to " + type + " in " + timeout.toMillis() + " ms; killed");
    }

    @Override
    public void broken(String what) {
      lose(WorkerErrorKind.CRASHED, null, what + WorkerLogs.exitDescription(process));
    }

    @Override
    public void garbled(String why, boolean maybeDying) {
      boolean exited = maybeDying && WorkerLogs.exitsSoon(process);
      lose(exited ? WorkerErrorKind.CRASHED : WorkerErrorKind.PROTOCOL, null, why
          + (exited ? WorkerLogs.exitDescription(process) : "; killed"));
    }
  }

  private static double millisSince(long nanos) {
    return (System.nanoTime() - nanos) / 1e6;
  }

  static <T> T join(CompletableFuture<T> f) {
    try {
      return f.get();
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      while (c instanceof CompletionException && c.getCause() != null) {
        c = c.getCause();
      }
      if (c instanceof RuntimeException r) {
        throw r;
      }
      throw new PoolException(String.valueOf(c), c);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new PoolException("interrupted while waiting for a worker", e);
    }
  }

  @Override
  public String toString() {
    return "Worker[pid " + pid + ", device " + device + (image == null ? "" : ", " + image) + "]";
  }
}
