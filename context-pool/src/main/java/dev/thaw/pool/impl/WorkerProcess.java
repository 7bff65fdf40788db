package dev.thaw.pool.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.pool.BecomeResult;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.ImageSource;
import dev.thaw.pool.InvokeResult;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.PoolException;
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
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.worker.WorkerConfig;
import dev.thaw.pool.worker.WorkerMain;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The parent's side of one worker process: its pipes, a reader thread that matches replies to requests by id,
 * and the deadlines. Every way a worker can fail ends in {@link #lose}: the process is killed, every pending
 * operation fails with the same {@link WorkerException}, and the pool is told once.
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
  }

  /** Loaded at first use, after the spawn: a server's first worker starts before Jackson has loaded anywhere. */
  private static final class Json {
    static final ObjectMapper MAPPER = FrameCodec.json();
  }
  private static final Duration STATUS_TIMEOUT = Duration.ofSeconds(10);
  private static final int LOG_TAIL_BYTES = 2000;
  /**
   * An INVOKE frame up to this size is written on the caller's thread: a pipe holds at least one page even when
   * the user's pipe budget is spent, and it is empty then (the worker's reader drains it, and one request at a
   * time means everything sent before was read). A worker that stopped reading is still ended by the deadline:
   * killing it closes the pipe, which fails the write.
   */
  static final int INLINE_WRITE_BYTES = 4096;

  private final int device;
  private final Process process;
  private final long pid;
  private final long spawnNanos;
  private final Path log;
  private final OutputStream out;
  private final DataInputStream in;
  private final ContextPoolOptions options;
  /** {@link ContextPoolOptions#wakeAhead()}, read once: every invoke asks for it. */
  private final long wakeAheadNanos;
  private final ScheduledExecutorService timer;
  private final Executor io;
  private final Listener listener;

  private final CompletableFuture<WorkerStart> ready = new CompletableFuture<>();
  private final CompletableFuture<RestoreCompletion> resident = new CompletableFuture<>();
  /** The host cache lease of the image this worker restores: held until the restore is complete or the worker ends. */
  private final AtomicReference<CacheLease> lease = new AtomicReference<>();
  private final Map<Integer, CompletableFuture<Frame>> pending = new ConcurrentHashMap<>();
  private final AtomicInteger ids = new AtomicInteger();
  private final AtomicBoolean busy = new AtomicBoolean();
  private final AtomicReference<WorkerException> ended = new AtomicReference<>();
  private volatile boolean becameAnImage;
  /** Set when a BECOME succeeded: only then may requests be sent. */
  private volatile boolean invocable;
  private volatile String image;
  private volatile boolean warm;
  /** The start as the second READY (warm) told it, or null. */
  private volatile WorkerStart warmStart;
  /** The PREPAREs sent to this worker, by image key: completed when the worker answered. */
  private final Map<String, CompletableFuture<Frame>> prepared = new ConcurrentHashMap<>();
  /** The host-cache placement each PREPARE carried, by image key: a BECOME with the same one need not send it. */
  private final Map<String, dev.thaw.pool.cache.ChunkPlacement> preparedPlacements = new ConcurrentHashMap<>();
  /** Keys READY said the worker prepared at start, without a host-cache placement: a PREPARE may add one. */
  private final java.util.Set<String> preparedAtStart = ConcurrentHashMap.newKeySet();
  /** The worker's recent invokes (decode, function, encode), smoothed: the wake-ahead's prediction; 0: none yet. */
  private volatile long invokeNanos;
  /** NEAR frames read, and those whose RESULT came while the reader polled for it: the wake-ahead's hits. */
  private final java.util.concurrent.atomic.AtomicLong nears = new java.util.concurrent.atomic.AtomicLong();
  private final java.util.concurrent.atomic.AtomicLong nearsCaught = new java.util.concurrent.atomic.AtomicLong();

  private WorkerProcess(int device, Process process, long spawnNanos, Path log, ContextPoolOptions options,
      ScheduledExecutorService timer, Executor io, Listener listener) {
    this.device = device;
    this.process = process;
    this.pid = process.pid();
    this.spawnNanos = spawnNanos;
    this.log = log;
    this.out = new BufferedOutputStream(process.getOutputStream(), 1 << 16);
    this.in = new DataInputStream(new BufferedInputStream(process.getInputStream(), 1 << 16));
    this.options = options;
    this.wakeAheadNanos = options.wakeAhead().toNanos();
    this.timer = timer;
    this.io = io;
    this.listener = listener;
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
        o.hostCachePath() == null ? null : o.hostCachePath().toString(), o.maxFrameBytes(), ProcessHandle.current().pid(), spawnNanos,
        o.warmupAfterReady(), o.storePath() == null ? List.of() : o.prepareAtStart(), o.protectAfterIdle().toMillis());
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
        synchronized (w.out) {
          w.out.write((config.toJson() + "\n").getBytes(StandardCharsets.UTF_8));
          w.out.flush();
        }
      } catch (IOException e) {
        p.destroyForcibly();
        throw new IOException("the prelaunched worker " + p.pid() + " took no config: " + e.getMessage(), e);
      }
    }
    Thread reader = new Thread(w::readLoop, "thaw-pool-worker-" + w.pid);
    reader.setDaemon(true);
    reader.start();
    long startMs = o.startTimeout().toMillis();
    timer.schedule(() -> {
      if (!w.ready.isDone()) {
        w.lose(WorkerErrorKind.DEADLINE, null, "not ready " + startMs + " ms after spawn; killed" + w.logTail());
      }
    }, startMs, TimeUnit.MILLISECONDS);
    return w;
  }

  /** Moves the prelaunched worker's log where the pool keeps its workers' logs; where it cannot, it stays. */
  private static Path adoptLog(Path from, Path to) {
    try {
      return java.nio.file.Files.move(from, to);
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
  public String image() {
    return image;
  }

  @Override
  public boolean isAlive() {
    return ended.get() == null && process.isAlive();
  }

  /** Why the worker ended, or null while it lives. */
  WorkerException endedBy() {
    return ended.get();
  }

  Process process() {
    return process;
  }

  @Override
  public CompletableFuture<BecomeResult> become(String name, byte[] manifest, ImageSource source) {
    return become(name, null, manifest, source, CompletableFuture.completedFuture(false));
  }

  @Override
  public BecomeResult becomeBlocking(String name, byte[] manifest, ImageSource source) {
    return join(become(name, manifest, source));
  }

  /**
   * Sends PREPARE for {@code image} unless this worker became an image, ended or has it already. Not a claim: the
   * worker prepares while blank, before whatever is sent after.
   */
  void prepare(PreparedImage image) {
    if (becameAnImage || ended.get() != null) {
      return;
    }
    if (image.placement() != null && preparedAtStart.remove(image.key())) {
      // Prepared at start, before the image was staged: the PREPARE tells it where the host cache holds the image
      // (the worker keeps the rest), so its BECOME does not resolve the placement on the cold path.
      prepared.remove(image.key());
    }
    prepared.computeIfAbsent(image.key(), key -> {
      ObjectNode head = FrameCodec.head();
      head.put("key", key);
      head.put("name", image.name());
      head.put("manifestBytes", image.manifest().length);
      byte[] body = image.manifest();
      if (image.placement() != null) {
        body = concat(image.manifest(), image.placement().toBytes());
        preparedPlacements.put(key, image.placement());
      }
      CompletableFuture<Frame> f = send(FrameType.PREPARE, head, body, options.becomeTimeout());
      f.exceptionally(e -> {
        System.err.println("thaw pool: worker " + pid + " did not prepare '" + image.name() + "': " + e.getMessage());
        return null;
      });
      return f;
    });
  }

  private static boolean samePlacement(dev.thaw.pool.cache.ChunkPlacement a, dev.thaw.pool.cache.ChunkPlacement b) {
    return b != null && (a == b || Arrays.equals(a.toBytes(), b.toBytes()));
  }

  /** Waits up to {@code nanos} for every PREPARE sent so far to be answered; false if one is still running. */
  boolean awaitPrepares(long nanos) throws InterruptedException {
    try {
      CompletableFuture.allOf(prepared.values().toArray(CompletableFuture[]::new))
          .handle((ok, failed) -> null).get(nanos, TimeUnit.NANOSECONDS);
      return true;
    } catch (java.util.concurrent.TimeoutException e) {
      return false;
    } catch (ExecutionException e) {
      return true;
    }
  }

  @Override
  public CompletableFuture<BecomeResult> become(PreparedImage image, ImageSource source) {
    CompletableFuture<Frame> p = prepared.get(image.key());
    // A PREPARE still running is waited for (the worker would finish it before any BECOME); one that failed, or
    // none sent, means the image goes whole.
    CompletableFuture<Boolean> isPrepared = p == null ? CompletableFuture.completedFuture(false)
        : p.handle((ok, failed) -> ok != null);
    return become(image.name(), image.key(), image.manifest(), source, isPrepared);
  }

  /**
   * Claims the worker for {@code name} now, then, once {@code isPrepared} says, sends a BECOME naming the prepared
   * {@code key} (no manifest) or carrying {@code manifest} whole; the placement follows either.
   */
  private CompletableFuture<BecomeResult> become(String name, String key, byte[] manifest, ImageSource source,
      CompletableFuture<Boolean> isPrepared) {
    checkUsable();
    if (becameAnImage) {
      throw new IllegalStateException("worker " + pid + " already became '" + image + "'; a worker becomes one "
          + "image in its life");
    }
    claim();
    becameAnImage = true;
    image = name;
    if (source.lease() != null) {
      lease.set(source.lease());
    }
    long t = System.nanoTime();
    long[] sent = new long[1];
    return release(isPrepared.thenCompose(named -> {
      sent[0] = System.nanoTime();
      ObjectNode head = FrameCodec.head();
      head.put("name", name);
      head.set("source", source.toJson());
      head.put("awaitResident", options.awaitResident());
      byte[] placement = source.placement() == null ? new byte[0] : source.placement().toBytes();
      byte[] body;
      if (named) {
        head.put("prepared", key);
        head.put("manifestBytes", 0);
        if (source.placement() != null && samePlacement(source.placement(), preparedPlacements.get(key))) {
          // The worker holds this placement resolved since its PREPARE: GPT-2-large's is 255 KB, which would cross
          // the pipe and be compared on the cold path.
          head.put("placement", "prepared");
          body = new byte[0];
        } else {
          body = placement;
        }
      } else {
        head.put("manifestBytes", manifest.length);
        body = concat(manifest, placement);
      }
      return send(FrameType.BECOME, head, body, options.becomeTimeout());
    }).thenApply(f -> becameFrom(name, f, t, sent[0])));
  }

  @Override
  public BecomeResult becomeBlocking(PreparedImage image, ImageSource source) {
    return join(become(image, source));
  }

  private BecomeResult becameFrom(String name, Frame f, long claimedNanos, long sentNanos) {
    long read = System.nanoTime();
    JsonNode h = f.head();
    invocable = true;
    long totalEnd = h.path("totalEndNanos").asLong(0);
    long answered = h.path("sentNanos").asLong(0);
    return new BecomeResult(name, h.path("source").asText("store"), phases(h.path("phases")),
        h.path("bytes").asLong(), millisSince(claimedNanos), (sentNanos - claimedNanos) / 1e6,
        totalEnd == 0 ? Double.NaN : (read - totalEnd) / 1e6,
        totalEnd == 0 || answered == 0 ? Double.NaN : (answered - totalEnd) / 1e6);
  }

  private static byte[] concat(byte[] a, byte[] b) {
    if (b.length == 0) {
      return a;
    }
    byte[] out = java.util.Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }

  @Override
  public CompletableFuture<RestoreCompletion> resident() {
    return resident;
  }

  @Override
  public CompletableFuture<InvokeResult> invoke(byte[] json, ByteBuffer binary, Duration deadline) {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + (becameAnImage ? " did not become '" + image + "' (its "
          + "BECOME failed or has not answered)" : " has not become an image"));
    }
    claim();
    byte[] body = json;
    if (binary != null && binary.hasRemaining()) {
      ByteBuffer b = binary.duplicate();
      body = new byte[json.length + b.remaining()];
      System.arraycopy(json, 0, body, 0, json.length);
      b.get(body, json.length, b.remaining());
    }
    ObjectNode head = FrameCodec.head();
    head.put("jsonBytes", json.length);
    long near = nearMicros();
    if (near > 0) {
      head.put("nearMicros", near);
    }
    long t = System.nanoTime();
    return release(send(FrameType.INVOKE, head, body, deadline == null ? options.invokeTimeout() : deadline)
        .thenApply(f -> {
          int n = Math.min(Math.max(f.head().path("jsonBytes").asInt(f.body().length), 0), f.body().length);
          byte[] responseJson = n == f.body().length ? f.body() : java.util.Arrays.copyOf(f.body(), n);
          ByteBuffer rest = ByteBuffer.wrap(f.body(), n, f.body().length - n).slice().asReadOnlyBuffer();
          Map<String, Double> phases = phases(f.head().path("phases"));
          learnInvoke(phases);
          return new InvokeResult(responseJson, rest, phases, millisSince(t));
        }));
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
    return new long[] {nears.get(), nearsCaught.get()};
  }

  @Override
  public InvokeResult invokeBlocking(byte[] json, ByteBuffer binary, Duration deadline) {
    return join(invoke(json, binary, deadline));
  }

  @Override
  public CompletableFuture<List<ExportedSlab>> exportReadOnly() {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + " has no image to export");
    }
    claim();
    return release(send(FrameType.EXPORT, FrameCodec.head(), null, STATUS_TIMEOUT)
        .thenApply(f -> ExportedSlab.decodeAll(f.head().path("slabs").asText(""))));
  }

  @Override
  public CompletableFuture<WorkerTimeline> restoreTimeline(int maxSpans) {
    checkUsable();
    if (!invocable) {
      throw new IllegalStateException("worker " + pid + " has no restore to trace");
    }
    ObjectNode head = FrameCodec.head();
    head.put("maxSpans", maxSpans);
    long sent = System.nanoTime();
    // Not claimed: the worker answers it between requests, so it may wait behind one.
    return send(FrameType.TRACE, head, null, options.invokeTimeout().plus(STATUS_TIMEOUT)).thenApply(f -> {
      long received = System.nanoTime();
      long now = f.head().path("nowNanos").asLong();
      boolean shared = now >= sent && now <= received;
      long shift = shared ? 0 : sent + (received - sent) / 2 - now;
      try {
        JsonNode trace = Json.MAPPER.readTree(f.body());
        double error = shared ? 0 : (received - sent) / 2e3;
        if (!shared && trace.path("traceEvents").isArray()) {
          ((com.fasterxml.jackson.databind.node.ArrayNode) trace.get("traceEvents")).addObject()
              .put("name", String.format("the worker's clock is not this process's: placed by the round trip, "
                  + "within %.0f us", error)).put("ph", "i").put("s", "g").put("pid", 1).put("tid", 0).put("ts", 0);
        }
        return new WorkerTimeline(trace, f.head().path("originNanos").asLong() + shift, shared, error);
      } catch (IOException e) {
        throw new CompletionException(new WorkerException(WorkerErrorKind.PROTOCOL, pid, null,
            "its restore timeline is not JSON: " + e.getMessage()));
      }
    });
  }

  @Override
  public CompletableFuture<WorkerStatus> status() {
    return send(FrameType.STATUS, FrameCodec.head(), null, STATUS_TIMEOUT).thenApply(f -> {
      JsonNode h = f.head();
      return new WorkerStatus(h.path("pid").asLong(), h.path("state").asText(),
          h.hasNonNull("image") ? h.get("image").asText() : null, h.path("invocations").asLong());
    });
  }

  @Override
  public void release() {
    if (ended.get() != null) {
      return;
    }
    if (!becameAnImage && !busy.get() && process.isAlive()) {
      listener.returned(this);
    } else {
      retire("released after becoming '" + image + "'");
    }
  }

  @Override
  public void evict() {
    lose(WorkerErrorKind.CRASHED, null, "evicted by its holder");
  }

  @Override
  public void close() {
    release();
  }

  // ---- ending ----

  /** Asks the worker to exit and kills it if it has not after the grace period. Not a loss. */
  void retire(String why) {
    WorkerException e = new WorkerException(WorkerErrorKind.STATE, pid, null, "worker ended: " + why);
    if (!ended.compareAndSet(null, e)) {
      return;
    }
    io.execute(() -> {
      try {
        synchronized (out) {
          FrameCodec.write(out, new Frame(FrameType.EXIT, ids.incrementAndGet(), FrameCodec.head()));
        }
      } catch (IOException ignored) {
        // Already gone.
      }
    });
    timer.schedule(process::destroyForcibly, options.exitGrace().toMillis(), TimeUnit.MILLISECONDS);
    failPending(e);
    listener.ended(this, e, false);
  }

  /** Kills the worker now and fails everything pending with one exception of {@code kind}. Idempotent. */
  void lose(WorkerErrorKind kind, String remoteType, String message) {
    lose(new WorkerLostException(kind, pid, remoteType, message));
  }

  private void lose(WorkerException e) {
    if (!ended.compareAndSet(null, e)) {
      return;
    }
    process.destroyForcibly();
    failPending(e);
    listener.ended(this, e, true);
  }

  private void failPending(WorkerException e) {
    ready.completeExceptionally(e);
    resident.completeExceptionally(e);
    closeLease();
    for (CompletableFuture<Frame> f : pending.values()) {
      f.completeExceptionally(e);
    }
  }

  // ---- requests ----

  private void checkUsable() {
    WorkerException e = ended.get();
    if (e != null) {
      throw e instanceof WorkerLostException ? new WorkerLostException(e.kind(), pid, e.remoteType(), e.detail())
          : new IllegalStateException(e.getMessage());
    }
  }

  private void claim() {
    if (!busy.compareAndSet(false, true)) {
      throw new IllegalStateException("worker " + pid + " is busy: one BECOME or INVOKE at a time");
    }
  }

  private <T> CompletableFuture<T> release(CompletableFuture<T> f) {
    return f.whenComplete((r, e) -> busy.set(false));
  }

  private CompletableFuture<Frame> send(FrameType type, ObjectNode head, byte[] body, Duration timeout) {
    int id = ids.incrementAndGet();
    CompletableFuture<Frame> f = new CompletableFuture<>();
    pending.put(id, f);
    WorkerException e = ended.get();
    if (e != null) {
      f.completeExceptionally(e);
    }
    long ms = timeout.toMillis();
    ScheduledFuture<?> deadline = timer.schedule(() -> lose(WorkerErrorKind.DEADLINE, null,
        "no answer to " + type + " in " + ms + " ms; killed"), ms, TimeUnit.MILLISECONDS);
    f.whenComplete((r, x) -> {
      deadline.cancel(false);
      pending.remove(id);
    });
    Frame frame = new Frame(type, id, head, body);
    if (type == FrameType.INVOKE && frame.body().length + FrameCodec.HEADER_BYTES + 256 <= INLINE_WRITE_BYTES) {
      write(frame);
    } else {
      // Off the caller's thread: a worker that stops reading fills the pipe, and only its deadline may end that.
      io.execute(() -> write(frame));
    }
    return f;
  }

  private void write(Frame frame) {
    try {
      synchronized (out) {
        FrameCodec.write(out, frame);
      }
    } catch (IOException x) {
      lose(WorkerErrorKind.CRASHED, null, "its stdin is closed (" + x.getMessage() + ")" + exitDescription());
    }
  }

  // ---- the reader thread ----

  private void readLoop() {
    try {
      while (true) {
        Frame f = FrameCodec.read(in, options.maxFrameBytes());
        switch (f.type()) {
          case READY -> onReady(f);
          case RESULT -> complete(f.id(), f);
          case NEAR -> awaitAwake(f.id());
          case RESIDENT -> onResident(f);
          case ERROR -> onError(f);
          default -> throw new ProtocolException(f.type() + " is not a frame a worker sends");
        }
      }
    } catch (EOFException e) {
      lose(WorkerErrorKind.CRASHED, null, "the process ended" + exitDescription());
    } catch (ProtocolException e) {
      // A process dying mid-frame, or a runtime printing on its way down, looks like garbage: say which it was.
      boolean exited = exitedSoon();
      lose(exited ? WorkerErrorKind.CRASHED : WorkerErrorKind.PROTOCOL, null, "it wrote bytes that are not a frame ("
          + e.getMessage() + ")" + (exited ? exitDescription() : "; killed" + logTail()));
    } catch (IOException e) {
      lose(WorkerErrorKind.CRASHED, null, "its stdout failed (" + e.getMessage() + ")" + exitDescription());
    } catch (RuntimeException e) {
      lose(WorkerErrorKind.PROTOCOL, null, "its frame did not read: " + e);
    }
  }

  /**
   * NEAR: the invoke {@code id} is due to end within the wake-ahead. Polls for its RESULT instead of sleeping in a
   * read, for at most three times the wake-ahead: a thread woken by the pipe after a long sleep is slow to run.
   */
  private void awaitAwake(int id) throws IOException {
    if (!pending.containsKey(id)) {
      return;
    }
    nears.incrementAndGet();
    long until = System.nanoTime() + 3 * wakeAheadNanos;
    while (in.available() == 0) {
      if (System.nanoTime() - until > 0) {
        return;
      }
      Thread.onSpinWait();
    }
    nearsCaught.incrementAndGet();
  }

  private void onReady(Frame f) {
    JsonNode h = f.head();
    JsonNode d = h.path("device");
    WorkerStart start = new WorkerStart(pid, d.path("driver").asText(), d.path("simulated").asBoolean(),
        d.path("name").asText(), phases(h.path("phases")), millisSince(spawnNanos), System.nanoTime());
    boolean warmNow = h.path("warm").asBoolean(true);
    if (ready.isDone()) {
      if (warmNow && !warm) {
        warmStart = start;
        warm = true;
        listener.warmed(this);
      }
      return;
    }
    warm = warmNow;
    // Images it prepared at start (ContextPoolOptions.prepareAtStart): no PREPARE is sent for those keys.
    for (JsonNode key : h.path("prepared")) {
      if (prepared.putIfAbsent(key.asText(), CompletableFuture.completedFuture(f)) == null) {
        preparedAtStart.add(key.asText());
      }
    }
    if (ready.complete(start)) {
      listener.ready(this);
    }
  }

  private void onResident(Frame f) {
    JsonNode h = f.head();
    closeLease();
    resident.complete(new RestoreCompletion(h.path("sinceBecomeMillis").asDouble(), h.path("bytes").asLong(),
        h.path("hostBytes").asLong(), h.path("storeBytes").asLong(), h.path("residentBytes").asLong(),
        h.path("copies").asInt(), h.path("promotions").asInt(), h.path("waits").asLong()));
  }

  private void closeLease() {
    CacheLease l = lease.getAndSet(null);
    if (l != null) {
      l.close();
    }
  }

  private void onError(Frame f) {
    JsonNode h = f.head();
    WorkerErrorKind kind;
    try {
      kind = WorkerErrorKind.valueOf(h.path("kind").asText());
    } catch (IllegalArgumentException e) {
      kind = WorkerErrorKind.INTERNAL;
    }
    String type = h.hasNonNull("type") ? h.get("type").asText() : null;
    String message = h.path("message").asText();
    if (h.has("errorName")) {
      message = message + " [" + h.path("call").asText() + ": " + h.path("errorName").asText() + "]";
    }
    if (f.id() == 0 || kind.workerLost()) {
      lose(kind, type, message + (f.id() == 0 ? logTail() : ""));
      return;
    }
    CompletableFuture<Frame> p = pending.get(f.id());
    if (p != null) {
      p.completeExceptionally(WorkerException.of(kind, pid, type, message));
    }
  }

  private void complete(int id, Frame f) {
    CompletableFuture<Frame> p = pending.get(id);
    if (p != null) {
      p.complete(f);
    }
  }

  // ---- messages ----

  private boolean exitedSoon() {
    try {
      return process.waitFor(200, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  private String exitDescription() {
    try {
      if (process.waitFor(2, TimeUnit.SECONDS)) {
        int s = process.exitValue();
        String what = s > 128 ? "killed by signal " + (s - 128)
            : s == WorkerMain.EXIT_STICKY ? "a sticky CUDA error"
            : s == WorkerMain.EXIT_PROTOCOL ? "a protocol error"
            : s == WorkerMain.EXIT_STARTUP ? "a start-up failure"
            : s == WorkerMain.EXIT_PARENT_GONE ? "its stdin closed"
            : "exit status " + s;
        return ": exit status " + s + " (" + what + ")" + logTail();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    return logTail();
  }

  /** The end of the worker's stderr, for messages. */
  String logTail() {
    try (RandomAccessFile f = new RandomAccessFile(log.toFile(), "r")) {
      long n = f.length();
      if (n == 0) {
        return "";
      }
      int take = (int) Math.min(n, LOG_TAIL_BYTES);
      byte[] b = new byte[take];
      f.seek(n - take);
      f.readFully(b);
      return "; its stderr ends:\n" + new String(b, StandardCharsets.UTF_8).strip();
    } catch (IOException e) {
      return "";
    }
  }

  Path log() {
    return log;
  }

  private static Map<String, Double> phases(JsonNode n) {
    Map<String, Double> phases = new java.util.LinkedHashMap<>();
    n.fields().forEachRemaining(e -> phases.put(e.getKey(), e.getValue().asDouble()));
    return phases;
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
