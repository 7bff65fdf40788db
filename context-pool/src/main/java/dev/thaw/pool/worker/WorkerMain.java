package dev.thaw.pool.worker;

import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.PreparedRestore;
import dev.thaw.image.restore.RestorePlan;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.RocksNative;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.PreparedImage;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.WorkerMessages.Device;
import dev.thaw.pool.protocol.WorkerMessages.Ready;
import dev.thaw.pool.worker.PreparedImages.Prepared;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceChoice;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import dev.thaw.runtime.host.Threads;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A pooled worker process: one device, one context, warm, serving the worker protocol ({@link FrameCodec},
 * {@code WorkerMessages}) with its parent over stdin (requests) and stdout (replies). This class is its start-up:
 * open the driver ({@code cuInit}), create the context and the {@link RestoreResources} every restore borrows
 * (stream, events, pinned staging, reader threads), map and register the host image cache, warm up ({@link
 * WorkerWarmup}; beside it, with a host cache and other devices, the links of other devices a restore may borrow:
 * {@link WorkerHelpers}), then send READY with the time of each phase. Beside the driver and the context, a prepare
 * thread opens the store read-only, prepares the images named to prepare at start and warms what needs no context
 * (Jackson, the manifest parser). With {@link WorkerConfig#warmupAfterReady()} READY comes before the launch warm-up,
 * which then runs until a request comes (and is announced by a second READY, {@code warm}, if it ran to its end).
 * {@link WorkerLoop} then reads and executes frames; {@link WorkerImage} is the image's life.
 *
 * <p>Invariants: stdout carries only frames — {@code System.out} is pointed at stderr before anything else runs, so
 * a function that prints cannot corrupt the protocol. The worker never outlives its parent: end of stdin or the
 * parent's pid gone halts it ({@value #EXIT_PARENT_GONE}). Bytes on stdin that are not a frame get one ERROR, then
 * exit status {@value #EXIT_PROTOCOL}. A sticky CUDA error is reported and the worker exits {@value #EXIT_STICKY}.
 *
 * <p>Logging: the worker's own notes (this package's {@code worker <pid>: ...} and {@code thaw worker: ...} lines)
 * go straight to {@code System.err}, the one place in Thaw's libraries that does not log through slf4j, because
 * stderr is the worker's log: the pool gives each worker a file of its own and quotes its end in the errors it
 * raises ({@code WorkerLogs}), and a note must land there as a plain line in a process whose stdout is the protocol.
 * What the worker's libraries log through slf4j goes to stderr too, into the same file.
 */
public final class WorkerMain {

  public static final int EXIT_STARTUP = 2;
  public static final int EXIT_PROTOCOL = 3;
  public static final int EXIT_STICKY = 4;
  public static final int EXIT_PARENT_GONE = 5;
  public static final int EXIT_RESTORE_FAILED = 6;
  /**
   * The argument of a prelaunched worker: its config comes as the first line of its stdin, before any frame, from the
   * pool that takes it over (it exits if its stdin closes first).
   */
  public static final String CONFIG_ON_STDIN = "-";

  private final WorkerConfig config;
  private final WorkerReplies out;
  private final WorkerLoop loop;
  private final long pid = ProcessHandle.current().pid();
  /** A prelaunched worker's wait for its config; 0 for a spawned one. */
  private final double configWaitMillis;

  private GpuDriver driver;
  private GpuContext context;
  private RestoreResources resources;
  private HostCacheView cache;
  private RocksChunkStore store;
  /** Other devices' links for the restore, opened after READY; null without a host cache or another device. */
  private WorkerHelpers helpers;
  private final CompletableFuture<GpuContext> contextMade = new CompletableFuture<>();
  private final CompletableFuture<RocksChunkStore> storeOpened = new CompletableFuture<>();
  /** {@link WorkerConfig#prepareAtStart()}'s images, prepared on the prepare thread. */
  private final CompletableFuture<List<Prepared>> preparedAtStart = new CompletableFuture<>();
  private final CompletableFuture<Void> cpuWarm = new CompletableFuture<>();
  private volatile double storeMillis;
  private volatile double cpuWarmupMillis;
  private volatile double prepareAtStartMillis;
  /** Where {@link #prepareAtStartMillis} went, summed over the images: manifest, class, context wait, prepare. */
  private final Map<String, Double> prepareAtStartParts = new ConcurrentHashMap<>();

  private WorkerMain(WorkerConfig config, DataInputStream in, OutputStream out, double configWaitMillis) {
    this.config = config;
    this.out = new WorkerReplies(out);
    this.loop = new WorkerLoop(in, this.out, config.maxFrameBytes());
    this.configWaitMillis = configWaitMillis;
  }

  public static void main(String[] args) {
    long entered = System.nanoTime();
    // RocksDB's native library and cuInit first, on threads of their own, while this one reads its config (Jackson's
    // first use is not free): the pool names the device in the environment as well.
    RocksNative.loadAhead();
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
    double waited = 0;
    if (json.equals(CONFIG_ON_STDIN)) {
      // Prelaunched: the JVM started, and cuInit began, before the pool knew this worker's config.
      long t = System.nanoTime();
      json = configLine(in);
      waited = (System.nanoTime() - t) / 1e6;
    }
    new WorkerMain(WorkerConfig.fromJson(json), in, protocol, waited).run(entered);
  }

  /** The first line of {@code in}, UTF-8, without its newline; the worker exits if stdin ends first. */
  private static String configLine(DataInputStream in) {
    ByteArrayOutputStream line = new ByteArrayOutputStream(512);
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
    return line.toString(StandardCharsets.UTF_8);
  }

  private void run(long entered) {
    loop.startReading();
    Threads.startDaemon(this::watchParent, "thaw-worker-parent-watch");
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
    Threads.startDaemon(this::openStoreAndWarmCpu, "thaw-worker-prepare");
    WorkerImage image;
    try {
      long t = openDevice(phases);
      image = attachImage(phases, t);
      if (!config.warmupAfterReady()) {
        warmUp(phases);
      }
    } catch (Throwable e) {
      Throwable c = WorkerFailures.unwrap(e);
      contextMade.completeExceptionally(c);
      c.printStackTrace();
      out.fail(WorkerErrorKind.STARTUP, c, EXIT_STARTUP);
      return;
    }
    if (!config.warmupAfterReady()) {
      // What the warm-up allocated goes now: a cold start must not run into a collection it did not cause.
      System.gc();
    }
    Ready ready = new Ready(pid, FrameCodec.VERSION, new Device(driver.name(), driver.isSimulated(),
        context.device().name(), config.ordinal()), phases, !config.warmupAfterReady(), image.preparedKeys(),
        helperDevices());
    image.blank();
    out.send(0, ready);
    if (config.warmupAfterReady()) {
      warmUpAfterReady(ready, phases);
    }
    loop.serve();
  }

  /** The driver, the context (with the address arena beside it), the restore's resources and the host cache. */
  private long openDevice(Map<String, Double> phases) throws Exception {
    long t = System.nanoTime();
    driver = GpuDrivers.open(config.device() == null ? DeviceChoice.fromEnvironment()
        : DeviceChoice.parse(config.device()));
    t = phase(phases, "driver", t);
    CompletableFuture<Double> arena = CompletableFuture.supplyAsync(() -> {
      long a = System.nanoTime();
      driver.prepareDevice(config.ordinal());
      return (System.nanoTime() - a) / 1e6;
    }, r -> Threads.startDaemon(r, "thaw-worker-arena"));
    context = driver.createContext(config.ordinal());
    contextMade.complete(context);
    t = phase(phases, "context", t);
    try {
      phases.put("addressArena", arena.join());
    } catch (CompletionException e) {
      // The context made the arena itself, or failed: its own error said why.
    }
    // What every restore borrows, made once per worker; what it makes behind (staging buffers, events) waits for
    // the images prepared at start: both need the driver.
    resources = RestoreResources.create(context, preparedAtStart);
    t = phase(phases, "restoreResources", t);
    if (config.hostCache() != null) {
      cache = HostCacheView.attach(Path.of(config.hostCache()), context);
      t = phase(phases, "hostCache", t);
    }
    return t;
  }

  /** The store and the images prepared at start, joined; the image life cycle takes the loop's work from here. */
  private WorkerImage attachImage(Map<String, Double> phases, long t) {
    store = storeOpened.join();
    if (config.storePath() != null) {
      phases.put("store", storeMillis);
      t = phase(phases, "storeWait", t);
    }
    WorkerStores stores = new WorkerStores(config.storePath(), store);
    PreparedImages prepared = new PreparedImages(driver, context, cache, stores);
    if (!config.prepareAtStart().isEmpty()) {
      prepared.addAll(preparedAtStart.join());
      phases.put("prepareAtStart", prepareAtStartMillis);
      for (String part : List.of("manifest", "class", "contextWait", "prepare")) {
        phases.put("prepareAtStart." + part, prepareAtStartParts.getOrDefault(part, 0.0));
      }
      phase(phases, "prepareWait", t);
    }
    if (cache != null && config.helperLinks() > 0 && driver.devices().size() > 1) {
      helpers = new WorkerHelpers(driver, context, config);
    }
    WorkerImage image = new WorkerImage(config, driver, context, resources, cache, stores, prepared, helpers, out, loop);
    loop.attach(image);
    return image;
  }

  /** The prepare thread: opens the store, prepares the images named at start, then warms the CPU paths. */
  private void openStoreAndWarmCpu() {
    if (config.storePath() != null && !config.prepareAtStart().isEmpty()) {
      // Jackson's first look at a manifest's records runs beside the store's opening, not in the first parse.
      int[] parses = {0};
      Threads.startDaemon(() -> WorkerWarmup.manifests(() -> parses[0]++ > 0), "thaw-worker-manifest-warmup");
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
      WorkerWarmup.json(FrameCodec.json(), loop::requested);
      WorkerWarmup.manifests(loop::requested);
    } finally {
      cpuWarmupMillis = (System.nanoTime() - t) / 1e6;
      cpuWarm.complete(null);
    }
  }

  /**
   * Prepares {@link WorkerConfig#prepareAtStart()}'s images as a PREPARE would: manifest read and parsed and the
   * function's class loaded beside {@code cuInit} and the context, the rest (state, modules, kernels) once the
   * context is made. An image that cannot be prepared is said on stderr and left out: the parent prepares it later,
   * or sends it whole.
   */
  private List<Prepared> prepareAtStart(RocksChunkStore s) {
    long start = System.nanoTime();
    List<Prepared> made = new ArrayList<>();
    for (String tag : config.prepareAtStart()) {
      try {
        long t = System.nanoTime();
        if (s.manifest(tag).isEmpty() && s.manifest(GroupImage.rankTag(tag, 0)).isPresent()) {
          // A group: the pool sends it whole (PREPARE with its ranks) once its ranks are staged.
          continue;
        }
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

  /** The devices this worker holds a helper link to now. */
  private List<Integer> helperDevices() {
    return helpers == null ? List.of() : helpers.devices();
  }

  /**
   * Opens the helper links on a thread of their own, beside the warm-up (a context on another device is not free:
   * never on a cold path); completes with how long that took, at once when there are none to open.
   */
  private CompletableFuture<Double> openHelpers() {
    if (helpers == null) {
      return CompletableFuture.completedFuture(0.0);
    }
    return CompletableFuture.supplyAsync(() -> {
      long t = System.nanoTime();
      helpers.openAll();
      return (System.nanoTime() - t) / 1e6;
    }, r -> Threads.startDaemon(r, "thaw-worker-helpers"));
  }

  /** The warm-ups that need the context, on this thread; each stops early when a request is waiting. */
  private boolean warmUp(Map<String, Double> phases) throws Exception {
    CompletableFuture<Double> links = openHelpers();
    long t = System.nanoTime();
    // The launch loop stops for any queued work: a PREPARE (the parent holds a BECOME until it is answered) runs
    // after it, and the loop then runs again unless a request came meanwhile.
    boolean whole = WorkerWarmup.launches(context, config.warmupLaunches(), () -> loop.requested()
        || loop.workQueued());
    // From here on the warm-up holds nothing on the device between its steps: queued PREPAREs run there.
    if (!whole && !loop.preparesThenRequestWaiting()) {
      whole = WorkerWarmup.launches(context, config.warmupLaunches(), loop::requested);
    }
    t = phase(phases, "warmup", t);
    whole = whole && !loop.preparesThenRequestWaiting();
    if (whole && store != null && config.warmupLaunches() > 0) {
      whole = rehearse(phases, t);
    }
    // Warm means able to restore through every link: the links are waited for unless a request comes first (a BECOME
    // then restores through those open by then).
    whole = whole && helpersOpened(links, phases);
    if (whole && config.warmupImage() != null && store != null) {
      t = System.nanoTime();
      whole = WorkerWarmup.image(context, resources, store, config.warmupImage(), loop::requested);
      phase(phases, "warmupImage", t);
    }
    if (loop.requested()) {
      // The CPU warm-up on the prepare thread stops at its next step; the request does not wait for that.
      return false;
    }
    cpuWarm.join();
    phases.put("cpuWarmup", cpuWarmupMillis);
    return whole && !loop.preparesThenRequestWaiting();
  }

  /** A restore rehearsed end to end (and, with the host cache, the HBM tier's cold path: take, import, map). */
  private boolean rehearse(Map<String, Double> phases, long t) throws Exception {
    boolean whole = true;
    try {
      whole = WorkerWarmup.rehearse(context, resources, store, loop::preparesThenRequestWaiting);
    } catch (CudaOutOfMemoryException e) {
      // A device too small (or too full) for the 32 MiB rehearsal: the worker serves, with colder code.
      System.err.println("thaw worker: restore rehearsal skipped: " + e.getMessage());
    }
    t = phase(phases, "rehearsal", t);
    if (whole && cache != null) {
      try {
        whole = WorkerWarmup.rehearseHbm(context, resources, store, loop::preparesThenRequestWaiting);
      } catch (CudaException | IOException e) {
        System.err.println("thaw worker: HBM-tier rehearsal skipped: " + e.getMessage());
      }
      phase(phases, "hbmRehearsal", t);
    }
    return whole;
  }

  /**
   * Waits for the helper links to be open (or given up on) unless a request comes first; then, with rehearsals on,
   * rehearses a restore through them. Returns false if a request cut it short.
   */
  private boolean helpersOpened(CompletableFuture<Double> links, Map<String, Double> phases) throws Exception {
    long t = System.nanoTime();
    while (!links.isDone()) {
      if (loop.preparesThenRequestWaiting()) {
        return false;
      }
      try {
        links.get(5, TimeUnit.MILLISECONDS);
      } catch (TimeoutException e) {
        // Looks for a request again.
      }
    }
    if (helpers == null) {
      return true;
    }
    phases.put("helperLinks", links.join());
    t = phase(phases, "helperLinksWait", t);
    List<HelperLink> open = helpers.lend(helpers.devices());
    if (open.isEmpty() || store == null || config.warmupLaunches() == 0) {
      return true;
    }
    boolean whole = WorkerWarmup.rehearseHelpers(context, resources, store, open, loop::preparesThenRequestWaiting);
    phase(phases, "helperRehearsal", t);
    return whole;
  }

  /**
   * Warms up after READY (the worker can serve already): a BECOME that arrives meanwhile cuts it short and is served
   * at once. A warm-up that ran to its end is announced by a second READY with {@code warm} true and its phases.
   */
  private void warmUpAfterReady(Ready ready, Map<String, Double> phases) {
    boolean whole;
    try {
      whole = warmUp(phases);
    } catch (Throwable e) {
      e.printStackTrace();
      out.fail(WorkerErrorKind.STARTUP, e, EXIT_STARTUP);
      return;
    }
    if (!whole) {
      System.err.println("worker " + pid + ": warm-up cut short by a waiting request");
      return;
    }
    // What the warm-up allocated goes now (no request waits): a cold start must not run into a collection it did not
    // cause.
    System.gc();
    out.send(0, new Ready(ready.pid(), ready.protocol(), ready.device(), phases, true, ready.prepared(),
        helperDevices()));
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

  /** Puts the time since {@code since} as {@code name} and returns now. */
  static long phase(Map<String, Double> phases, String name, long since) {
    long now = System.nanoTime();
    phases.put(name, (now - since) / 1e6);
    return now;
  }

  /** A daemon thread of the worker's, not started: {@link Threads#daemon}, for {@link WorkerImage}'s threads. */
  static Thread daemon(Runnable r, String name) {
    return Threads.daemon(r, name);
  }
}
