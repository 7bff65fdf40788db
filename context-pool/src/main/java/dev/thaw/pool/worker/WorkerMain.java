package dev.thaw.pool.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.cache.ChunkPlacement;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.pool.hbm.TieredRestoreSource;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A pooled worker process: one device, one context, warm, serving the frame protocol ({@link FrameCodec}) with
 * its parent over stdin (requests) and stdout (replies).
 *
 * <p>Start-up: open the driver ({@code cuInit}), create the context and the {@link RestoreResources} every restore
 * borrows (stream, events, pinned staging, reader threads), map and register the host image cache, warm up
 * ({@link WorkerWarmup}); then send READY with the time of each phase. Beside the driver and the context, a prepare
 * thread opens the store read-only and warms what needs no context (Jackson, the manifest parser). With
 * {@link WorkerConfig#warmupAfterReady()} READY comes before the launch warm-up, which then runs until a request
 * comes (and is announced by a second READY, {@code warm}, if it ran to its end). After that it serves
 * one BECOME (an on-demand restore: it answers once the function is invocable, and sends RESIDENT when the last
 * byte landed) and any number of INVOKEs, one at a time. Two threads share the work: one reads stdin and answers
 * STATUS and EXIT itself, so the parent can ask and stop a worker that is busy; the other executes. An INVOKE that
 * finds the worker idle runs on the thread that read it, and the two trade places (see {@link #serve}), so a warm
 * request waits for no thread to wake.
 *
 * <p>Invariants: stdout carries only frames — {@code System.out} is pointed at stderr before anything else runs,
 * so a function that prints cannot corrupt the protocol. The worker never outlives its parent: end of stdin
 * (the parent's end of the pipe closed, which the kernel does when the parent dies, even by SIGKILL) or the
 * parent's pid gone makes it halt at once. Bytes on stdin that are not a frame get one ERROR frame naming
 * what was wrong, then exit status {@value #EXIT_PROTOCOL}: the stream is out of step and cannot be trusted.
 * A sticky CUDA error (the context is poisoned) is reported and the worker exits {@value #EXIT_STICKY}.
 */
public final class WorkerMain {

  public static final int EXIT_STARTUP = 2;
  public static final int EXIT_PROTOCOL = 3;
  public static final int EXIT_STICKY = 4;
  public static final int EXIT_PARENT_GONE = 5;
  public static final int EXIT_RESTORE_FAILED = 6;
  /** Copy spans in a TRACE answer when the request names no cap. */
  private static final int TRACE_SPANS = 512;

  private enum State { STARTING, BLANK, BECOMING, READY, INVOKING }

  private final WorkerConfig config;
  private final DataInputStream in;
  private final OutputStream out;
  private final ObjectMapper json = FrameCodec.json();
  /** Guards {@link #work}, {@link #reading}, {@link #executing} and {@link #serving}. */
  private final Object turn = new Object();
  /** Work frames read while another one executes (or before start-up ended), in order. */
  private final ArrayDeque<Frame> work = new ArrayDeque<>();
  /** A thread reads stdin: at most one at a time. */
  private boolean reading;
  /** A thread executes a work frame: at most one at a time. */
  private boolean executing;
  /** Start-up is over: work may execute. */
  private boolean serving;
  private final long pid = ProcessHandle.current().pid();

  private volatile State state = State.STARTING;
  private volatile String image;
  private volatile long invocations;
  private volatile java.util.concurrent.ScheduledThreadPoolExecutor nearTimer;

  private GpuDriver driver;
  private GpuContext context;
  private RocksChunkStore store;
  private RestoreResources resources;
  private HostCacheView cache;
  private OnDemandRestore restored;
  /** {@link #restored}'s read-only slabs are protected (or protection was tried): executing thread only. */
  private boolean slabsProtected;
  /**
   * Set (under {@link #turn}) after a request's answer while the slabs are not protected yet: the thread waiting for
   * work protects them at {@link #protectAt} (its {@link System#nanoTime()}), after the worker has been idle
   * {@link WorkerConfig#protectAfterIdleMillis()} (on the H200 cuMemSetAccess took 0.1-0.4 ms alone, but up to 170
   * ms while other workers started beside it: a request right behind another must not wait for it).
   */
  private boolean protectPending;
  private long protectAt;
  /** What {@link #take()} returns when it is time to protect the slabs (not a frame that travels). */
  private static final Frame PROTECT = new Frame(FrameType.STATUS, -1, FrameCodec.head());
  private final java.util.concurrent.CompletableFuture<RocksChunkStore> storeOpened =
      new java.util.concurrent.CompletableFuture<>();
  private volatile double storeMillis;
  private volatile double cpuWarmupMillis;
  private volatile boolean requested;
  private final CompletableFuture<GpuContext> contextMade = new CompletableFuture<>();
  /** {@link WorkerConfig#prepareAtStart()}'s images, prepared on the prepare thread. */
  private final CompletableFuture<List<Prepared>> preparedAtStart = new CompletableFuture<>();
  private volatile double prepareAtStartMillis;
  /** Where {@link #prepareAtStartMillis} went, summed over the images: manifest, class, context wait, prepare. */
  private final Map<String, Double> prepareAtStartParts = new java.util.concurrent.ConcurrentHashMap<>();
  /** When the BECOME was read off stdin (one per worker), for its {@code queued} phase; 0 before. */
  private volatile long becomeRead;
  private final java.util.concurrent.CompletableFuture<Void> cpuWarm = new java.util.concurrent.CompletableFuture<>();
  /** Images prepared while blank, by key, least recently prepared first (main thread only). */
  private final LinkedHashMap<String, Prepared> prepared = new LinkedHashMap<>();

  /**
   * One PREPARE's result: the restore made ready ahead, the placement it was prepared with (and the chunks it
   * resolves to in this worker's view of the arena), and the store it was checked against.
   */
  private record Prepared(String key, String name, byte[] manifest, PreparedRestore restore, byte[] placement,
      PinnedChunks chunks, RocksChunkStore store) {}
  /** The BECOME that made {@link #restored}: when it was read, and its answer's head (for TRACE). */
  private Became became;

  private record Became(long takenNanos, JsonNode head) {}

  /** The main thread's: when the BECOME that succeeded began, for its RESIDENT report. */
  private long becomeStart;

  private WorkerMain(WorkerConfig config, DataInputStream in, OutputStream out) {
    this.config = config;
    this.in = in;
    this.out = out;
  }

  /**
   * The argument of a prelaunched worker: its config comes as the first line of its stdin, before any frame, from the
   * pool that takes it over (it exits if its stdin closes first).
   */
  public static final String CONFIG_ON_STDIN = "-";
  /** A prelaunched worker's wait for its config (its JVM started before its pool did); 0 for a spawned one. */
  private static double configWaitMillis;

  /** The first line of {@code in}, UTF-8, without its newline; the worker exits if stdin ends first. */
  private static String configLine(DataInputStream in) {
    java.io.ByteArrayOutputStream line = new java.io.ByteArrayOutputStream(512);
    try {
      int b;
      while ((b = in.read()) != '\n') {
        if (b < 0) {
          Runtime.getRuntime().halt(EXIT_PARENT_GONE);
        }
        line.write(b);
      }
    } catch (IOException e) {
      Runtime.getRuntime().halt(EXIT_PARENT_GONE);
    }
    return line.toString(java.nio.charset.StandardCharsets.UTF_8);
  }

  public static void main(String[] args) {
    long entered = System.nanoTime();
    // cuInit first, on its own thread, while this one reads its config (Jackson's first use is not free): the pool
    // names the device in the environment as well.
    // RocksDB's native library, the most of the store's opening, beside the config's parse and cuInit.
    dev.thaw.image.store.RocksNative.loadAhead();
    try {
      GpuDrivers.openAhead(DeviceChoice.parse(System.getenv(DeviceChoice.ENV)));
    } catch (IllegalArgumentException e) {
      // The config's device is the one that counts; a bad variable is reported when it is opened.
    }
    OutputStream protocol = new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 16);
    System.setOut(System.err);
    if (args.length != 1) {
      System.err.println("usage: WorkerMain '<config JSON>' | WorkerMain - (started by the context pool, not by hand)");
      System.exit(EXIT_STARTUP);
    }
    DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(FileDescriptor.in), 1 << 16));
    String json = args[0];
    if (json.equals(CONFIG_ON_STDIN)) {
      // Prelaunched: the JVM started, and cuInit began, before the pool knew this worker's config.
      long waited = System.nanoTime();
      json = configLine(in);
      configWaitMillis = (System.nanoTime() - waited) / 1e6;
    }
    WorkerConfig config = WorkerConfig.fromJson(json);
    new WorkerMain(config, in, protocol).run(entered);
  }

  private void run(long entered) {
    synchronized (turn) {
      reading = true;
    }
    Thread reader = new Thread(() -> serve(true), "thaw-worker-reader");
    reader.setDaemon(true);
    reader.start();
    Thread watch = new Thread(this::watchParent, "thaw-worker-parent-watch");
    watch.setDaemon(true);
    watch.start();

    Map<String, Double> phases = new LinkedHashMap<>();
    if (config.spawnNanos() != 0) {
      phases.put("jvm", (entered - config.spawnNanos()) / 1e6);
    }
    if (configWaitMillis > 0) {
      // Prelaunched: cuInit ran through this wait, so the driver phase that follows is shorter.
      phases.put("prelaunchWait", configWaitMillis);
    }
    // What needs no context (the store, Jackson's and the manifest parser's cold paths) runs on a thread of its own
    // while this one waits on cuInit and the context: the two together cost what the slower of them costs.
    Thread prepare = new Thread(this::openStoreAndWarmCpu, "thaw-worker-prepare");
    prepare.setDaemon(true);
    prepare.start();
    try {
      long t = System.nanoTime();
      driver = GpuDrivers.open(config.device() == null ? DeviceChoice.fromEnvironment()
          : DeviceChoice.parse(config.device()), SimOptions.fromEnvironment());
      t = phase(phases, "driver", t);
      // The address arena (CUDA: the primary context it is reserved in) beside the worker's own context.
      CompletableFuture<Double> arena = CompletableFuture.supplyAsync(() -> {
        long a = System.nanoTime();
        driver.prepareDevice(config.ordinal());
        return (System.nanoTime() - a) / 1e6;
      }, r -> startDaemon(r, "thaw-worker-arena"));
      context = driver.createContext(config.ordinal());
      contextMade.complete(context);
      t = phase(phases, "context", t);
      try {
        phases.put("addressArena", arena.join());
      } catch (java.util.concurrent.CompletionException e) {
        // The context made the arena itself, or failed: its own error said why.
      }
      // The streams and events a restore and its function run on; created now so the cold path does not.
      // What every restore borrows: its stream, events, pinned staging and threads, made once per worker.
      // What it makes behind (staging buffers, events) waits for the image prepared at start: both need the driver.
      resources = RestoreResources.create(context, preparedAtStart);
      t = phase(phases, "restoreResources", t);
      if (config.hostCache() != null) {
        cache = HostCacheView.attach(Path.of(config.hostCache()), context);
        t = phase(phases, "hostCache", t);
      }
      store = storeOpened.join();
      if (config.storePath() != null) {
        phases.put("store", storeMillis);
        t = phase(phases, "storeWait", t);
      }
      if (!config.prepareAtStart().isEmpty()) {
        for (Prepared p : preparedAtStart.join()) {
          prepared.put(p.key(), p);
        }
        phases.put("prepareAtStart", prepareAtStartMillis);
        for (String part : List.of("manifest", "class", "contextWait", "prepare")) {
          phases.put("prepareAtStart." + part, prepareAtStartParts.getOrDefault(part, 0.0));
        }
        phase(phases, "prepareWait", t);
      }
      if (!config.warmupAfterReady()) {
        warmUp(phases);
      }
    } catch (Throwable e) {
      Throwable c = e instanceof java.util.concurrent.CompletionException && e.getCause() != null ? e.getCause() : e;
      contextMade.completeExceptionally(c);
      c.printStackTrace();
      send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(WorkerErrorKind.STARTUP, c)));
      Runtime.getRuntime().halt(EXIT_STARTUP);
    }
    if (!config.warmupAfterReady()) {
      // What the warm-up allocated goes now: a cold start must not run into a collection it did not cause.
      System.gc();
    }
    ObjectNode ready = FrameCodec.head();
    ready.put("pid", pid);
    ready.put("protocol", FrameCodec.VERSION);
    ObjectNode device = ready.putObject("device");
    device.put("driver", driver.name());
    device.put("simulated", driver.isSimulated());
    device.put("name", context.device().name());
    device.put("ordinal", config.ordinal());
    ready.set("phases", json.valueToTree(phases));
    ready.put("warm", !config.warmupAfterReady());
    ArrayNode keys = ready.putArray("prepared");
    prepared.keySet().forEach(keys::add);
    state = State.BLANK;
    send(new Frame(FrameType.READY, 0, ready));
    if (config.warmupAfterReady()) {
      warmUpAfterReady(ready, phases);
    }
    synchronized (turn) {
      serving = true;
      turn.notifyAll();
    }
    serve(false);
  }

  private static void startDaemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    t.start();
  }

  /** The prepare thread: opens the store, then warms the CPU paths until done or a request is waiting. */
  private void openStoreAndWarmCpu() {
    if (config.storePath() != null && !config.prepareAtStart().isEmpty()) {
      // The images prepared at start are parsed as soon as the store is open; Jackson's first look at the manifest's
      // records (157-205 ms of GPT-2 small's 'manifest' part on the H200) is made beside the store's opening instead.
      int[] parses = {0};
      startDaemon(() -> WorkerWarmup.manifests(() -> parses[0]++ > 0), "thaw-worker-manifest-warmup");
    }
    try {
      if (config.storePath() != null) {
        long t = System.nanoTime();
        RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(Path.of(config.storePath()))
            .setReadOnly(true));
        storeMillis = (System.nanoTime() - t) / 1e6;
        storeOpened.complete(s);
        preparedAtStart.complete(prepareAtStart(s));
      } else {
        storeOpened.complete(null);
        preparedAtStart.complete(List.of());
      }
    } catch (Throwable e) {
      storeOpened.completeExceptionally(e);
      preparedAtStart.complete(List.of());
      cpuWarm.complete(null);
      return;
    }
    long t = System.nanoTime();
    try {
      WorkerWarmup.json(json, this::requestWaiting);
      WorkerWarmup.manifests(this::requestWaiting);
    } finally {
      cpuWarmupMillis = (System.nanoTime() - t) / 1e6;
      cpuWarm.complete(null);
    }
  }

  /**
   * Prepares {@link WorkerConfig#prepareAtStart()}'s images on the prepare thread, as a PREPARE would: the manifest
   * read from {@code s} and parsed and the function's class loaded beside {@code cuInit} and the context, the rest
   * (state, modules, kernels) once the context is made. An image that cannot be prepared is said on stderr and
   * left out: the parent prepares it later, or sends it whole.
   */
  private List<Prepared> prepareAtStart(RocksChunkStore s) {
    long start = System.nanoTime();
    List<Prepared> made = new ArrayList<>();
    for (String tag : config.prepareAtStart()) {
      try {
        long t = System.nanoTime();
        byte[] bytes = s.manifest(tag).orElseThrow(() -> new ImageNotFoundException(tag));
        ImageManifest manifest = ImageManifest.read(bytes);
        RestorePlan plan = RestorePlan.of(manifest);
        t = prepareAtStartPart("manifest", t);
        Class.forName(manifest.function().className(), true, WorkerMain.class.getClassLoader());
        t = prepareAtStartPart("class", t);
        GpuContext c = contextMade.join();
        t = prepareAtStartPart("contextWait", t);
        PreparedRestore restore = new OnDemandRestorer(s).prepare(plan, c, RestoreSource.STORE_ONLY);
        prepareAtStartPart("prepare", t);
        made.add(new Prepared(PreparedImage.keyOf(tag, bytes), tag, bytes, restore, new byte[0], null, s));
      } catch (Exception | LinkageError e) {
        System.err.println("worker " + pid + ": '" + tag + "' not prepared at start: " + e);
      }
    }
    prepareAtStartMillis = (System.nanoTime() - start) / 1e6;
    return made;
  }

  private long prepareAtStartPart(String part, long since) {
    long now = System.nanoTime();
    prepareAtStartParts.merge(part, (now - since) / 1e6, Double::sum);
    return now;
  }

  /**
   * True once a request came for the main thread: a warm-up then stops for good, so that it never delays one nor
   * competes with it for a core.
   */
  private boolean requestWaiting() {
    return requested;
  }

  /** The warm-ups that need the context, on this thread; each stops early when a request is waiting. */
  private boolean warmUp(Map<String, Double> phases) throws Exception {
    long t = System.nanoTime();
    // The launch loop stops for any queued work: a PREPARE (the parent holds a BECOME until it is answered) runs
    // after it, and the loop then runs again unless a request came meanwhile.
    boolean whole = WorkerWarmup.launches(context, config.warmupLaunches(), () -> requested || workQueued());
    // From here on the warm-up holds nothing on the device between its steps: queued PREPAREs run there.
    if (!whole && !preparesThenRequestWaiting()) {
      whole = WorkerWarmup.launches(context, config.warmupLaunches(), this::requestWaiting);
    }
    t = phase(phases, "warmup", t);
    whole = whole && !preparesThenRequestWaiting();
    if (whole && store != null && config.warmupLaunches() > 0) {
      try {
        whole = WorkerWarmup.rehearse(context, resources, store, this::preparesThenRequestWaiting);
      } catch (dev.thaw.runtime.gpu.CudaOutOfMemoryException e) {
        // A device too small (or too full) for the 32 MiB rehearsal: the worker serves, with colder code.
        System.err.println("thaw worker: restore rehearsal skipped: " + e.getMessage());
      }
      t = phase(phases, "rehearsal", t);
      if (whole && cache != null) {
        // The HBM tier is used with the host cache: its cold path (take, import, map read-only) rehearsed too.
        try {
          whole = WorkerWarmup.rehearseHbm(context, resources, store, this::preparesThenRequestWaiting);
        } catch (dev.thaw.runtime.gpu.CudaException | IOException e) {
          System.err.println("thaw worker: HBM-tier rehearsal skipped: " + e.getMessage());
        }
        t = phase(phases, "hbmRehearsal", t);
      }
    }
    if (whole && config.warmupImage() != null && store != null) {
      whole = WorkerWarmup.image(context, resources, store, config.warmupImage(), this::requestWaiting);
      t = phase(phases, "warmupImage", t);
    }
    if (requested) {
      // The CPU warm-up on the prepare thread stops at its next step; the request does not wait for that.
      return false;
    }
    cpuWarm.join();
    phases.put("cpuWarmup", cpuWarmupMillis);
    return whole && !preparesThenRequestWaiting();
  }

  /**
   * Warms up after READY (the worker can serve already): a BECOME that arrives meanwhile cuts it short and is served
   * at once. A warm-up that ran to its end is announced by a second READY with {@code warm} true and its phases.
   */
  private void warmUpAfterReady(ObjectNode ready, Map<String, Double> phases) {
    boolean whole;
    try {
      whole = warmUp(phases);
    } catch (Throwable e) {
      e.printStackTrace();
      send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(WorkerErrorKind.STARTUP, e)));
      Runtime.getRuntime().halt(EXIT_STARTUP);
      return;
    }
    if (!whole) {
      System.err.println("worker " + pid + ": warm-up cut short by a waiting request");
      return;
    }
    // What the warm-up allocated goes now (no request waits): a cold start must not run into a collection it did not
    // cause.
    System.gc();
    ObjectNode warm = ready.deepCopy();
    warm.set("phases", json.valueToTree(phases));
    warm.put("warm", true);
    send(new Frame(FrameType.READY, 0, warm));
  }

  private static long phase(Map<String, Double> phases, String name, long since) {
    long now = System.nanoTime();
    phases.put(name, (now - since) / 1e6);
    return now;
  }

  // ---- two threads: one reads stdin, one executes the work frames (BECOME, PREPARE, INVOKE, ...), one at a time ----

  /**
   * The loop both threads (main and the reader) run. One thread reads stdin at a time and answers STATUS and EXIT
   * itself, so a busy worker still answers them. An INVOKE read while nothing executes runs on the thread that read
   * it, and the other thread takes over reading: the request waits for no thread to wake up. Any other work frame,
   * or one read while work executes, is queued for the thread that is not reading, in order.
   *
   * @param reads true for the thread that holds the reading turn when it starts
   */
  private void serve(boolean reads) {
    while (true) {
      Frame f;
      try {
        f = reads ? read() : take();
      } catch (InterruptedException e) {
        return;
      }
      reads = false;
      if (f == null) {
        reads = true;
        continue;
      }
      if (f == PROTECT) {
        protectWhileIdle();
      } else {
        execute(f);
      }
      synchronized (turn) {
        executing = false;
        turn.notifyAll();
      }
    }
  }

  /** Waits for queued work (then executes it: returns it) or the reading turn (then returns null). */
  private Frame take() throws InterruptedException {
    synchronized (turn) {
      while (true) {
        if (serving && !executing && !work.isEmpty()) {
          executing = true;
          return work.poll();
        }
        if (!reading) {
          reading = true;
          return null;
        }
        if (protectPending && serving && !executing) {
          long left = protectAt - System.nanoTime();
          if (left <= 0) {
            // Idle long enough: protect, holding the executing turn, so a request read meanwhile waits for it.
            protectPending = false;
            executing = true;
            return PROTECT;
          }
          turn.wait(Math.max(1, left / 1_000_000));
          continue;
        }
        turn.wait();
      }
    }
  }

  /** True if a frame is queued for execution (while warming up: for the main thread). */
  private boolean workQueued() {
    synchronized (turn) {
      return !work.isEmpty();
    }
  }

  /**
   * Runs the PREPAREs at the head of the queue now, on the main thread, before the worker serves: a warm-up calls it
   * where it holds nothing on the device, so a PREPARE (which the parent waits for before it sends a BECOME) never
   * waits for a whole warm-up. Nothing else executes work until {@link #serving}.
   *
   * @return true if a request is waiting (the warm-up should stop)
   */
  private boolean preparesThenRequestWaiting() {
    while (!requested) {
      Frame f;
      synchronized (turn) {
        f = work.peek();
        if (f == null || f.type() != FrameType.PREPARE) {
          break;
        }
        work.poll();
      }
      execute(f);
    }
    return requested;
  }

  /** Reads until an INVOKE this thread may execute now (returned), queueing other work; the reading turn is left. */
  private Frame read() {
    while (true) {
      Frame f = readFrame();
      if (f.type() == FrameType.BECOME) {
        becomeRead = System.nanoTime();
      }
      if (f.type() != FrameType.PREPARE) {
        // Preparing an image is ahead-of-time work: it runs at a warm-up's safe points and does not stop it.
        requested = true;
      }
      synchronized (turn) {
        if (f.type() == FrameType.INVOKE && serving && !executing && work.isEmpty()) {
          executing = true;
          reading = false;
          turn.notifyAll();
          return f;
        }
        work.add(f);
        turn.notifyAll();
      }
    }
  }

  private void execute(Frame f) {
    Frame reply;
    boolean restoring = f.type() == FrameType.BECOME;
    long taken = System.nanoTime();
    try {
      reply = switch (f.type()) {
        case BECOME -> become(f);
        case PREPARE -> prepare(f);
        case EXPORT -> export(f);
        case TRACE -> trace(f);
        default -> invoke(f);
      };
    } catch (Throwable e) {
      WorkerErrorKind kind = WorkerFailures.kindOf(e, restoring);
      if (kind == WorkerErrorKind.CUDA_STICKY || kind == WorkerErrorKind.INTERNAL) {
        e.printStackTrace();
      }
      send(new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(kind, e)));
      if (kind == WorkerErrorKind.CUDA_STICKY) {
        Runtime.getRuntime().halt(EXIT_STICKY);
      }
      if (restoring && state == State.BECOMING) {
        state = State.BLANK;
        image = null;
      } else if (state == State.INVOKING) {
        state = State.READY;
      }
      return;
    }
    if (restoring && reply.type() == FrameType.RESULT) {
      // Its phases begin when it was read (the first one, queued, is the wait to be taken up).
      became = new Became(becomeRead != 0 ? becomeRead : taken, reply.head());
      reply.head().put("sentNanos", System.nanoTime());
    }
    send(reply);
    if (restoring && reply.type() == FrameType.RESULT) {
      reportResident(f.id(), restored, becomeStart);
    }
    if (restoring && state == State.READY) {
      // This worker is that image for life: the others' modules go (after the answer, off the cold path).
      prepared.values().forEach(p -> p.restore().close());
      prepared.clear();
    }
    if (f.type() == FrameType.INVOKE && !slabsProtected && restored != null) {
      // Not after a BECOME: the first request is on its way, and a restore done by then is a small one. Not at once
      // either: once the worker has been idle a while, so that a request right behind this one does not wait.
      if (config.protectAfterIdleMillis() == 0) {
        // At once, while this thread holds the executing turn: the next request runs after it.
        protectWhileIdle();
      } else {
        protectAfter(config.protectAfterIdleMillis());
      }
    }
  }

  /** The thread waiting for work protects the slabs {@code millis} from now, unless work comes first (then later). */
  private void protectAfter(long millis) {
    synchronized (turn) {
      protectPending = true;
      protectAt = System.nanoTime() + millis * 1_000_000;
    }
  }

  /**
   * Write-protects the image's read-only slabs once its restore is resident, here where no request runs: called once
   * the worker has been idle {@link WorkerConfig#protectAfterIdleMillis()} after a request's answer (or at once), by
   * the thread that holds the executing turn, so an INVOKE read meanwhile waits for it (a {@code cuMemSetAccess} per
   * slab, once per worker; a restore still copying is tried again after the next idle stretch). Never while a
   * request's kernels may use a slab: a mapping's access changed under them faulted cold starts on the GPU
   * ({@code docs/design/memory-tiers.md}, "Write protection").
   */
  private void protectWhileIdle() {
    try {
      protectSlabs("while idle after " + invocations + " request(s)");
      if (!slabsProtected && restored != null && !restored.isResident()) {
        // Copies still due: again after the next idle stretch (at least 5 ms: not a spin while they land).
        protectAfter(Math.max(config.protectAfterIdleMillis(), 5));
      }
    } catch (RuntimeException e) {
      // A refusal leaves the slab writable and is reported by the restore; what gets here is the context's error.
      e.printStackTrace();
      WorkerErrorKind kind = WorkerFailures.kindOf(e, false);
      if (kind == WorkerErrorKind.CUDA_STICKY) {
        // The context is lost, and so is this worker: the pool replaces it.
        send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(kind, e)));
        Runtime.getRuntime().halt(EXIT_STICKY);
      }
    }
  }

  /**
   * Prepares an image ahead of its BECOME ({@link OnDemandRestorer#prepare}): parses the manifest, resolves the
   * placement, checks the store holds it, loads the class, reads the state, loads the modules. An image the
   * worker cannot prepare is an ERROR that leaves it blank: the parent then sends that image whole.
   */
  private Frame prepare(Frame f) throws Exception {
    if (state != State.BLANK) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "this worker became '" + image + "'; it prepares no other image"));
    }
    long start = System.nanoTime();
    String key = f.head().path("key").asText("");
    String name = f.head().path("name").asText("image");
    if (key.isEmpty()) {
      throw new ProtocolException("PREPARE without a key");
    }
    byte[] body = f.body();
    int manifestBytes = manifestBytes(f);
    byte[] manifestBody = manifestBytes == body.length ? body : Arrays.copyOf(body, manifestBytes);
    byte[] placement = Arrays.copyOfRange(body, manifestBytes, body.length);
    Prepared known = prepared.get(key);
    if (known != null && Arrays.equals(known.manifest(), manifestBody)) {
      // Prepared already (at start, before the image was staged): only where the host cache holds it is new.
      Map<String, Double> phases = new LinkedHashMap<>();
      PinnedChunks chunks = placement.length == 0 || cache == null ? null : cacheChunks(placement);
      prepared.put(key, new Prepared(key, name, manifestBody, known.restore(), placement, chunks, known.store()));
      long t = phase(phases, "placement", start);
      resolveAhead(chunks, known.restore().plan().manifest());
      phase(phases, "resolve", t);
      phases.put("total", (System.nanoTime() - start) / 1e6);
      ObjectNode h = FrameCodec.head();
      h.set("phases", json.valueToTree(phases));
      return new Frame(FrameType.RESULT, f.id(), h);
    }
    ImageManifest manifest = ImageManifest.read(manifestBody);
    Map<String, Double> phases = new LinkedHashMap<>();
    long t = phase(phases, "manifest", start);
    PinnedChunks chunks = placement.length == 0 || cache == null ? null : cacheChunks(placement);
    t = phase(phases, "placement", t);
    RocksChunkStore store = storeFor(JsonNodeFactory.instance.objectNode(), name, manifestBody);
    t = phase(phases, "store", t);
    RestoreSource tiers = chunks == null ? RestoreSource.STORE_ONLY : hostTier(chunks);
    PreparedRestore restore = new OnDemandRestorer(store).prepare(RestorePlan.of(manifest), context, tiers);
    t = phase(phases, "class, state, modules", t);
    resolveAhead(chunks, manifest);
    phase(phases, "resolve", t);
    Prepared old = prepared.remove(key);
    if (old != null) {
      old.restore().close();
    }
    prepared.put(key, new Prepared(key, name, manifestBody, restore, placement, chunks, store));
    int keep = Math.max(1, f.head().path("keep").asInt(ContextPoolOptions.DEFAULT_MAX_PREPARED_IMAGES));
    while (prepared.size() > keep) {
      Prepared eldest = prepared.remove(prepared.keySet().iterator().next());
      eldest.restore().close();
    }
    // The garbage of parsing goes now, while idle, not in the middle of the cold start that follows.
    System.gc();
    phases.put("total", (System.nanoTime() - start) / 1e6);
    ObjectNode h = FrameCodec.head();
    h.set("phases", json.valueToTree(phases));
    return new Frame(FrameType.RESULT, f.id(), h);
  }

  /**
   * Looks every chunk of a prepared image up in its host cache placement, through both kinds of source a BECOME
   * restores it from (the host cache alone, and with the HBM tier), so that the BECOME's restore thread finds them at
   * full speed: on the H200 the restore thread of a fresh worker took 2.1-2.6 ms to find GPT-2-large's first
   * allocation (~500 chunks) before its first copy, code not yet compiled and digests not yet hashed. Nothing with
   * no placement.
   */
  private static void resolveAhead(PinnedChunks chunks, ImageManifest manifest) {
    if (chunks == null) {
      return;
    }
    for (RestoreSource source : List.of(hostTier(chunks), new TieredRestoreSource(chunks, null))) {
      try (RestoreSource.Lease lease = source.lease(manifest)) {
        for (ImageManifest.Allocation a : manifest.allocations()) {
          for (ImageManifest.Chunk c : a.chunks()) {
            lease.find(c.digest());
          }
        }
      }
    }
  }

  private static RestoreSource hostTier(PinnedChunks chunks) {
    return m -> d -> chunks.find(d).map(c -> new RestoreSource.HostChunk(c.buffer(), c.offset())).orElse(null);
  }

  private static int manifestBytes(Frame f) {
    int n = f.head().path("manifestBytes").asInt(f.body().length);
    if (n < 0 || n > f.body().length) {
      throw new ImageRestoreException(f.type() + " says its manifest has " + n + " of the body's "
          + f.body().length + " bytes", null);
    }
    return n;
  }

  /**
   * Read-only slabs created exportable, for the HBM tier; where the device refuses exportable memory for any reason
   * but lack of memory, fresh memory (said once on stderr): the image restores, and merely cannot join the tier.
   */
  private static final FunctionSession.SlabSource EXPORTABLE_OR_FRESH = (context, slab) -> {
    try {
      return FunctionSession.SlabSource.EXPORTABLE_READ_ONLY.back(context, slab);
    } catch (dev.thaw.runtime.gpu.CudaOutOfMemoryException e) {
      throw e;
    } catch (dev.thaw.runtime.gpu.CudaException e) {
      System.err.println("thaw worker: exportable memory refused (" + e.getMessage() + "); slab at 0x"
          + Long.toHexString(slab.address()) + " is not exportable");
      return FunctionSession.SlabSource.FRESH.back(context, slab);
    }
  };

  private Frame become(Frame f) throws Exception {
    if (state != State.BLANK) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "this worker already became '" + image + "'; a worker becomes one image in its life"));
    }
    String name = f.head().path("name").asText("image");
    long start = System.nanoTime();
    // From stdin to here: the work before it, or the warm-up finding a safe point to stop at.
    long read = becomeRead;
    double queued = read == 0 ? 0 : Math.max(0, (start - read) / 1e6);
    byte[] body = f.body();
    String key = f.head().path("prepared").asText("");
    Prepared ready = key.isEmpty() ? null : prepared.remove(key);
    if (!key.isEmpty() && ready == null) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "BECOME names prepared image '" + key + "', which this worker has not prepared"));
    }
    image = name;
    state = State.BECOMING;
    int manifestBytes = ready != null ? 0 : manifestBytes(f);
    byte[] manifestBody = ready != null ? null : manifestBytes == body.length ? body : Arrays.copyOf(body, manifestBytes);
    ImageManifest manifest = ready != null ? ready.restore().plan().manifest() : ImageManifest.read(manifestBody);
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("queued", queued);
    long t = phase(phases, ready != null ? "prepared" : "manifest", start);
    JsonNode source = f.head().path("source");
    RestoreSource tiers = RestoreSource.STORE_ONLY;
    PinnedChunks lastChunks = null;
    String from = "store";
    if (source.path("kind").asText().equals("cache")) {
      PinnedChunks chunks;
      if (f.head().path("placement").asText("").equals("prepared")) {
        // The parent says the placement this image was prepared with holds: it sent none.
        if (ready == null || ready.chunks() == null) {
          throw new ImageRestoreException("BECOME says the host cache placement '" + name + "' was prepared with "
              + "holds, and this worker prepared it with none", null);
        }
        chunks = ready.chunks();
      } else {
        byte[] placement = Arrays.copyOfRange(body, manifestBytes, body.length);
        // The placement it was prepared with holds unless the cache moved the image since (staged it again).
        chunks = ready != null && ready.chunks() != null && Arrays.equals(placement, ready.placement())
            ? ready.chunks() : cacheChunks(placement);
      }
      lastChunks = chunks;
      tiers = hostTier(chunks);
      from = "cache";
      t = phase(phases, "placement", t);
    }
    ResidentSlabs resident = null;
    OnDemandOptions onDemand = new OnDemandOptions();
    JsonNode hbm = source.path("hbm");
    if (hbm.isObject()) {
      if (!from.equals("cache")) {
        throw new ImageRestoreException("BECOME names HBM-tier slabs without the host cache", null);
      }
      String slabs = hbm.path("slabs").asText("");
      if (!slabs.isBlank()) {
        try {
          resident = ResidentSlabs.take(hbm.path("pid").asLong(), ExportedSlab.decodeAll(slabs));
        } catch (IOException | IllegalArgumentException e) {
          // The tier dropped them meanwhile (or they cannot be taken): restore every byte from the host cache.
          System.err.println("thaw worker: HBM-tier slabs not taken, restoring from the host cache: " + e);
        }
      }
      onDemand.slabSource(resident != null ? resident : EXPORTABLE_OR_FRESH);
      tiers = new TieredRestoreSource(lastChunks, resident);
      t = phase(phases, "hbm take", t);
    }
    // A prepared image was checked against the store then; that store is still the one open unless another
    // PREPARE reopened it since.
    RocksChunkStore store = ready != null && ready.store() == this.store ? ready.store()
        : storeFor(source, name, ready != null ? ready.manifest() : manifestBody);
    t = phase(phases, "store", t);
    OnDemandRestore restore;
    try {
      restore = ready != null ? new OnDemandRestorer(store).restore(ready.restore(), tiers, resources, onDemand)
          : new OnDemandRestorer(store).restore(manifest, context, tiers, resources, onDemand);
    } finally {
      if (resident != null) {
        resident.close();
      }
    }
    double hbmImportMillis = -1;
    if (resident != null && !resident.residentBuffers().isEmpty()) {
      from = "hbm";
      // Part of "map allocations": the slabs imported instead of created (not a phase of its own).
      hbmImportMillis = resident.importMillis();
    }
    // Disjoint phases that add up to the total: what the restore call spent besides modules, map and state
    // (loading the function class, planning, starting the stream) is "start restore".
    OnDemandRestore.Timings rt = restore.timings();
    long now = System.nanoTime();
    double call = (now - t) / 1e6;
    phases.put("load modules", rt.modulesMillis());
    phases.put("map allocations", rt.mapMillis());
    phases.put("rebuild state", rt.stateMillis());
    phases.put("start restore", Math.max(0, call - rt.modulesMillis() - rt.mapMillis() - rt.stateMillis()));
    t = now;
    boolean full = f.head().path("awaitResident").asBoolean(false);
    if (full) {
      try {
        restore.awaitResident();
      } catch (RuntimeException e) {
        restore.close();
        throw e;
      }
      phase(phases, "resident", t);
    }
    restored = restore;
    state = State.READY;
    long totalEnd = System.nanoTime();
    phases.put("total", queued + (totalEnd - start) / 1e6);
    // Its RESIDENT report is arranged once the answer is written (reportResident): nothing here may cost the first
    // request time. On the H200 the answer left 2-3 ms after the total; on the sim device's host, registering the
    // report (a lambda bootstrapped at its first use in a fresh worker) took 1-4.6 ms of that, Jackson's tree of the
    // phases ~0.1; written out, the answer leaves 0.3 ms after the total.
    becomeStart = start;
    ObjectNode h = FrameCodec.head();
    // With sentNanos (put as it is written): how long the answer took to reach the parent, and this side's part.
    h.put("totalEndNanos", totalEnd);
    ObjectNode p = h.putObject("phases");
    for (Map.Entry<String, Double> e : phases.entrySet()) {
      p.put(e.getKey(), e.getValue());
    }
    h.put("bytes", manifest.totalBytes());
    h.put("source", from);
    if (hbmImportMillis >= 0) {
      h.put("hbmImportMillis", hbmImportMillis);
    }
    h.put("resident", restore.isResident());
    return new Frame(FrameType.RESULT, f.id(), h);
  }

  /**
   * Sends RESIDENT (or, if the restore fails, ERROR and exits) once the BECOME's restore completes: after its answer,
   * always (a restore already complete reports at once, from here).
   */
  private void reportResident(int becomeId, OnDemandRestore restore, long start) {
    restore.resident().whenComplete((ok, failure) -> resident(becomeId, restore, start, failure));
  }

  /**
   * Tells the parent the restore is complete (it may let the host cache evict the image's chunks now), or that
   * it failed after the function became invocable — then the instance cannot serve, and the worker ends.
   */
  private void resident(int becomeId, OnDemandRestore restore, long start, Throwable failure) {
    if (failure != null) {
      Throwable c = failure instanceof java.util.concurrent.CompletionException && failure.getCause() != null
          ? failure.getCause() : failure;
      WorkerErrorKind kind = WorkerFailures.kindOf(c, true);
      c.printStackTrace();
      send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(kind, c)));
      Runtime.getRuntime().halt(EXIT_RESTORE_FAILED);
      return;
    }
    ObjectNode h = FrameCodec.head();
    h.put("sinceBecomeMillis", (restore.residentNanos() - start) / 1e6);
    OnDemandRestore.Stats s = restore.stats();
    h.put("bytes", s.bytes());
    h.put("hostBytes", s.hostBytes());
    h.put("storeBytes", s.storeBytes());
    h.put("residentBytes", s.residentBytes());
    h.put("copies", s.copies());
    h.put("promotions", s.promotions());
    h.put("waits", s.waits());
    send(new Frame(FrameType.RESIDENT, becomeId, h));
  }

  private PinnedChunks cacheChunks(byte[] placement) {
    if (cache == null) {
      throw new ImageRestoreException("BECOME names the host cache, and this worker maps none (start the pool "
          + "with a host cache path)", null);
    }
    try {
      return cache.chunks(ChunkPlacement.fromBytes(placement));
    } catch (IllegalArgumentException e) {
      throw new ImageRestoreException("the host cache placement does not fit this worker's arena: "
          + e.getMessage(), e);
    }
  }

  /**
   * The store a BECOME names. A read-only store sees what was committed when it was opened, so the one opened at
   * start serves an image only when it holds that image's manifest, byte for byte (then it holds all its chunks:
   * a commit names only chunks already stored); otherwise the store is opened again, now.
   */
  private RocksChunkStore storeFor(JsonNode source, String name, byte[] manifest) {
    String kind = source.path("kind").asText("store");
    if (!kind.equals("store") && !kind.equals("cache")) {
      throw new ImageRestoreException("image source '" + kind + "' is not one this worker reads", null);
    }
    Path path = Path.of(source.path("path").asText(config.storePath() == null ? "" : config.storePath()))
        .toAbsolutePath().normalize();
    if (store != null && store.path().equals(path)
        && store.manifest(name).map(m -> Arrays.equals(m, manifest)).orElse(false)) {
      return store;
    }
    if (store != null) {
      store.close();
    }
    store = RocksChunkStore.open(new StoreOptions().setPath(path).setReadOnly(true));
    return store;
  }

  /** Protects {@link #restored}'s read-only slabs if it is resident and they are not yet; says so once. */
  private void protectSlabs(String when) {
    OnDemandRestore r = restored;
    if (r == null || state != State.READY || slabsProtected) {
      return;
    }
    long t = System.nanoTime();
    if (r.protectReadOnlySlabs()) {
      slabsProtected = true;
      OnDemandRestore.Protection p = r.protection();
      // Once per worker: what the GPU runs count (scripts/gpu/roslabs-run.sh).
      System.err.printf(java.util.Locale.ROOT, "thaw worker: read-only slabs protected %s: %d of %d slab(s), %.1f "
          + "MiB, cuMemSetAccess %.3f ms, %.3f ms in all%s%n", when, p.slabs(), p.of(), p.bytes() / 1048576.0,
          p.millis(), (System.nanoTime() - t) / 1e6, p.refused() == null ? "" : "; refused: " + p.refused());
    }
  }

  /** Hands the image's read-only slabs to the parent's HBM tier: descriptors it takes before this worker exits. */
  private Frame export(Frame f) {
    if (state != State.READY || restored == null || !restored.isResident()) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "only a worker whose image is wholly on the device exports it (state " + state + ")"));
    }
    // Idle here: the slabs are protected now if no earlier idle point found the restore resident.
    protectSlabs("at EXPORT");
    List<Long> written = restored.mayHaveBeenWritten();
    if (!written.isEmpty()) {
      System.err.println("thaw worker: read-only slabs " + written + " may have been written before they were "
          + "protected; not handed to the HBM tier");
    }
    List<ExportedSlab> slabs = HbmExport.exportReadOnly(restored.function().session(), written);
    ObjectNode h = FrameCodec.head();
    h.put("pid", ProcessHandle.current().pid());
    h.put("slabs", ExportedSlab.encodeAll(slabs));
    return new Frame(FrameType.RESULT, f.id(), h);
  }

  /**
   * The restore's timeline (TRACE), time zero when the BECOME was read off stdin: a row of the BECOME's phases, laid
   * end to end as its answer reported them, with the moment the last byte landed, then the restore's own rows
   * ({@code RestoreTrace}: host phases, copies on the restore stream, the first launch), copy spans capped at
   * {@code maxSpans}. Its events have all completed once the restore is resident and no request runs, as here.
   */
  private Frame trace(Frame f) throws IOException {
    if (state != State.READY || restored == null || became == null || !restored.isResident()) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "only a worker whose image is wholly on the device has a timeline to give (state " + state + ")"));
    }
    int maxSpans = Math.max(1, f.head().path("maxSpans").asInt(TRACE_SPANS));
    long zero = became.takenNanos();
    ObjectNode trace = restored.trace().chromeTrace(zero, maxSpans);
    ArrayNode events = (ArrayNode) trace.get("traceEvents");
    JsonNode h = became.head();
    ObjectNode row = events.insertObject(0);
    row.put("name", "thread_name").put("ph", "M").put("pid", 1).put("tid", 0);
    row.putObject("args").put("name", "worker " + pid + " on device " + config.ordinal() + ": BECOME");
    JsonNode phases = h.path("phases");
    ObjectNode all = traceSpan(events, "BECOME " + image, 0, phases.path("total").asDouble() * 1e3);
    all.putObject("args").put("image", image).put("source", h.path("source").asText())
        .put("bytes", h.path("bytes").asLong()).put("pid", pid).put("device", config.ordinal());
    double t = 0;
    for (Map.Entry<String, JsonNode> p : (Iterable<Map.Entry<String, JsonNode>>) phases::fields) {
      if (!p.getKey().equals("total")) {
        double dur = p.getValue().asDouble() * 1e3;
        traceSpan(events, p.getKey(), t, dur);
        t += dur;
      }
    }
    ObjectNode landed = events.addObject();
    landed.put("name", "resident: every byte on the device").put("ph", "i").put("s", "t").put("pid", 1)
        .put("tid", 0).put("ts", (restored.residentNanos() - zero) / 1e3);
    ObjectNode head = FrameCodec.head();
    head.put("originNanos", zero);
    head.put("nowNanos", System.nanoTime());
    return new Frame(FrameType.RESULT, f.id(), head, json.writeValueAsBytes(trace));
  }

  private static ObjectNode traceSpan(ArrayNode events, String name, double tsMicros, double durMicros) {
    ObjectNode e = events.addObject();
    e.put("name", name).put("ph", "X").put("pid", 1).put("tid", 0).put("ts", tsMicros).put("dur", durMicros);
    return e;
  }

  private Frame invoke(Frame f) throws Exception {
    if (state != State.READY) {
      return new Frame(FrameType.ERROR, f.id(), WorkerFailures.head(WorkerErrorKind.STATE,
          "INVOKE before this worker became an image"));
    }
    state = State.INVOKING;
    long start = System.nanoTime();
    // The parent's reader sleeps in a read while this runs; NEAR wakes it a little before the RESULT is due.
    long nearMicros = f.head().path("nearMicros").asLong(0);
    java.util.concurrent.ScheduledFuture<?> near = nearMicros <= 0 ? null : nearTimer().schedule(
        () -> send(new Frame(FrameType.NEAR, f.id(), FrameCodec.head())), nearMicros * 1000,
        java.util.concurrent.TimeUnit.NANOSECONDS);
    try {
      int jsonBytes = f.head().path("jsonBytes").asInt(f.body().length);
      if (jsonBytes < 0 || jsonBytes > f.body().length) {
        throw new ProtocolException("jsonBytes " + jsonBytes + " outside the body's " + f.body().length);
      }
      JsonNode body = json.readTree(f.body(), 0, jsonBytes);
      if (body == null || !body.isObject()) {
        throw new dev.thaw.runtime.function.InvalidRequestException("the request is not a JSON object");
      }
      Optional<ByteBuffer> binary = jsonBytes == f.body().length ? Optional.empty()
          : Optional.of(ByteBuffer.wrap(f.body(), jsonBytes, f.body().length - jsonBytes).slice());
      long t = System.nanoTime();
      double decodeMs = (t - start) / 1e6;
      FunctionResponse r = restored.function().invoke(new FunctionRequest(body, binary));
      long t2 = System.nanoTime();
      byte[] responseJson = json.writeValueAsBytes(r.json());
      byte[] out = responseJson;
      if (r.binary().isPresent()) {
        ByteBuffer b = r.binary().get().duplicate();
        out = new byte[responseJson.length + b.remaining()];
        System.arraycopy(responseJson, 0, out, 0, responseJson.length);
        b.get(out, responseJson.length, b.remaining());
      }
      invocations++;
      state = State.READY;
      ObjectNode h = FrameCodec.head();
      h.put("jsonBytes", responseJson.length);
      ObjectNode p = h.putObject("phases");
      p.put("decode", decodeMs);
      p.put("invoke", (t2 - t) / 1e6);
      p.put("encode", (System.nanoTime() - t2) / 1e6);
      return new Frame(FrameType.RESULT, f.id(), h, out);
    } finally {
      if (near != null) {
        near.cancel(false);
      }
    }
  }

  /** The thread that sends NEAR frames; made at the first INVOKE that asks for one. */
  private java.util.concurrent.ScheduledThreadPoolExecutor nearTimer() {
    java.util.concurrent.ScheduledThreadPoolExecutor t = nearTimer;
    if (t == null) {
      synchronized (this) {
        if (nearTimer == null) {
          nearTimer = new java.util.concurrent.ScheduledThreadPoolExecutor(1, r -> {
            Thread n = new Thread(r, "thaw-worker-near");
            n.setDaemon(true);
            return n;
          });
          nearTimer.setRemoveOnCancelPolicy(true);
        }
        t = nearTimer;
      }
    }
    return t;
  }

  // ---- stdin ----

  /**
   * The next work frame (BECOME, PREPARE, INVOKE, EXPORT, TRACE); STATUS and EXIT are answered here, anything else
   * ends the worker.
   */
  private Frame readFrame() {
    while (true) {
      Frame f;
      try {
        f = FrameCodec.read(in, config.maxFrameBytes());
      } catch (EOFException e) {
        // The parent closed our stdin or died: nothing of ours may outlive it.
        Runtime.getRuntime().halt(EXIT_PARENT_GONE);
        return null;
      } catch (ProtocolException e) {
        System.err.println("worker " + pid + ": protocol error on stdin: " + e.getMessage());
        send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(WorkerErrorKind.PROTOCOL, e.getMessage())));
        Runtime.getRuntime().halt(EXIT_PROTOCOL);
        return null;
      } catch (IOException e) {
        Runtime.getRuntime().halt(EXIT_PARENT_GONE);
        return null;
      }
      switch (f.type()) {
        case STATUS -> send(new Frame(FrameType.RESULT, f.id(), status()));
        case EXIT -> {
          send(new Frame(FrameType.RESULT, f.id(), FrameCodec.head()));
          Runtime.getRuntime().halt(0);
        }
        case BECOME, INVOKE, EXPORT, PREPARE, TRACE -> {
          return f;
        }
        default -> {
          String m = f.type() + " is not a request a worker takes";
          send(new Frame(FrameType.ERROR, 0, WorkerFailures.head(WorkerErrorKind.PROTOCOL, m)));
          Runtime.getRuntime().halt(EXIT_PROTOCOL);
        }
      }
    }
  }

  private ObjectNode status() {
    ObjectNode h = FrameCodec.head();
    h.put("pid", pid);
    h.put("state", state.name());
    if (image != null) {
      h.put("image", image);
    }
    h.put("invocations", invocations);
    synchronized (turn) {
      h.put("queued", work.size());
    }
    return h;
  }

  private void watchParent() {
    while (true) {
      try {
        Thread.sleep(250);
      } catch (InterruptedException e) {
        return;
      }
      boolean alive = ProcessHandle.of(config.parentPid()).map(ProcessHandle::isAlive).orElse(false);
      long parent = ProcessHandle.current().parent().map(ProcessHandle::pid).orElse(-1L);
      if (!alive || parent != config.parentPid()) {
        System.err.println("worker " + pid + ": parent " + config.parentPid() + " is gone; exiting");
        Runtime.getRuntime().halt(EXIT_PARENT_GONE);
      }
    }
  }

  private void send(Frame f) {
    synchronized (out) {
      try {
        FrameCodec.write(out, f);
      } catch (IOException e) {
        // The parent is gone.
        Runtime.getRuntime().halt(EXIT_PARENT_GONE);
      }
    }
  }
}
