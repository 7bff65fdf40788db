package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServeException;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.InstanceLostException;
import dev.thaw.server.spi.StartPhases;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Who serves which request: per function, a fair FIFO queue in front of its instances; instances started on
 * demand (cold) up to {@code maxInstances}, kept {@code minInstances}, evicted after {@code keepAlive} idle;
 * placed where the factory prices the start cheapest ({@link InstanceFactory#place}: by default the device that holds
 * most of the image, then the most free budget), evicting idle instances of other functions when memory (or,
 * in one address space, the image's addresses) is taken, and refusing with 503 when even that is not enough.
 *
 * <p>Invariants, all under this object's monitor: an instance serves at most its image's {@code concurrency}
 * requests at a time (1 unless its function batches them); a request is dispatched only from the head of its
 * function's queue, or straight to an instance with room when the queue is empty; a device's reserved bytes are the sum of the footprints of the instances placed on it (starting ones
 * included). Every instance's start, invokes and close run on that instance's own thread, never on an event
 * loop and never under the monitor — except the invoke of an instance that {@link FunctionInstance#invokesAsync()
 * invokes asynchronously} (a worker process), which the dispatching thread makes once it left the monitor; a request
 * is finished on the thread that completes its invoke.
 */
public final class Scheduler implements AutoCloseable {

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  static final long REAP_PERIOD_MILLIS = 100;
  /** How often a request whose instance was gone before it was sent goes to another one. */
  static final int RESENDS = 2;
  /** How long requests wait for busy instances to leave room before they get 503. */
  static final Duration PLACEMENT_WAIT = Duration.ofSeconds(30);
  private static final Logger LOG = LoggerFactory.getLogger(Scheduler.class);
  /**
   * A device whose instance served a request this recently lends its link to no start (it counts as busy): a function
   * that just answered is likely to be asked again within the tens of milliseconds a restore takes.
   */
  static final long RECENTLY_BUSY_NANOS = 100_000_000;
  /** Wake-ahead spins only while at most this many instances invoke: a quarter of the cores. */
  static final int WAKE_AHEAD_MAX_INVOKING = Math.max(1, Runtime.getRuntime().availableProcessors() / 4);

  private final InstanceFactory factory;
  private final ServerMetrics metrics;
  private final long retryAfterSeconds;
  private final int tracesKept;
  private final long epochNanos = System.nanoTime();
  private final List<DeviceInfo> devices;
  private final long[] budget;
  private final long[] reserved;
  /** Instances placed on each device, starting ones included. */
  private final int[] placed;
  private final Map<String, Deployment> deployments = new LinkedHashMap<>();
  /** Functions registered by a registry reference whose image is still being pulled (none of them deployed). */
  private final Map<String, Awaiting> awaiting = new LinkedHashMap<>();
  private final List<Deployment> retiring = new ArrayList<>();
  private final ScheduledExecutorService reaper;
  /** How long before a warm invoke's predicted end its event loop stops sleeping; 0: never. */
  private final long wakeAheadNanos;
  /** Fires the wake-aheads; made at the first one. */
  private ScheduledExecutorService waker;
  /** Instances invoking now, of every function: wake-ahead spins only while few do. */
  private int invoking;
  private final AtomicInteger threadIds = new AtomicInteger();
  private boolean draining;
  private boolean closed;
  private CompletableFuture<Void> drained;

  /**
   * @param gpuMemoryBytes each device's budget for instances; 0 for its whole memory
   * @param wakeAhead how long before a warm invoke's predicted end the thread that answers it stops sleeping
   *     ({@link Pending#onNearlyDone}); zero for never
   */
  public Scheduler(InstanceFactory factory, MeterRegistry metrics, long gpuMemoryBytes, Duration retryAfter,
      int tracesKept, Duration wakeAhead) {
    this.factory = factory;
    this.wakeAheadNanos = wakeAhead.toNanos();
    this.metrics = new ServerMetrics(metrics, this::instanceCount, this::queueDepth);
    this.retryAfterSeconds = Math.max(1, (retryAfter.toMillis() + 999) / 1000);
    this.tracesKept = tracesKept;
    this.devices = List.copyOf(factory.devices());
    this.budget = new long[devices.size()];
    this.reserved = new long[devices.size()];
    this.placed = new int[devices.size()];
    for (int i = 0; i < budget.length; i++) {
      long total = devices.get(i).totalMemoryBytes();
      budget[i] = gpuMemoryBytes > 0 ? Math.min(gpuMemoryBytes, total) : total;
      int d = i;
      this.metrics.device(d, () -> budget[d], () -> reserved(d));
    }
    this.reaper = Executors.newSingleThreadScheduledExecutor(r -> daemon(r, "thaw-server-reaper"));
    reaper.scheduleWithFixedDelay(this::reap, REAP_PERIOD_MILLIS, REAP_PERIOD_MILLIS, TimeUnit.MILLISECONDS);
  }

  public InstanceFactory factory() {
    return factory;
  }

  private synchronized long reserved(int device) {
    return reserved[device];
  }

  // ---- registry ----

  /**
   * Serves {@code image} as {@code name} with {@code options}, replacing a function of that name (whose queued and
   * in-flight requests finish on the old instances). Starts {@code minInstances} instances.
   *
   * @return true if a function of that name existed
   */
  public synchronized boolean register(String name, FunctionOptions options, ImageInfo image) {
    checkOpen();
    if (draining) {
      throw new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds);
    }
    awaiting.remove(name);
    Deployment d = new Deployment(name, new FunctionOptions(options), image);
    Deployment old = deployments.put(name, d);
    if (old != null) {
      // After the new one is in: the name's meters stay (counters go on counting) while the old one retires.
      retire(old);
    }
    factory.prepare(image.tag(), image.manifest());
    if (old != null) {
      unprepareIfUnused(old.image.tag());
    }
    ensureMinimum(d);
    return old != null;
  }

  /** Stops serving {@code name}: it is gone at once for new requests; completes once its queue drained. */
  public synchronized CompletableFuture<Void> unregister(String name) {
    Deployment d = deployments.remove(name);
    if (d == null) {
      if (awaiting.remove(name) != null) {
        return CompletableFuture.completedFuture(null);
      }
      throw ServeException.notFound(name);
    }
    retire(d);
    unprepareIfUnused(d.image.tag());
    return d.retired;
  }

  /** Tells the factory an image no function serves any more (two functions may serve one image). */
  private void unprepareIfUnused(String tag) {
    if (deployments.values().stream().noneMatch(x -> x.image.tag().equals(tag))) {
      factory.unprepare(tag);
    }
  }

  /**
   * The image {@code name} serves, or empty for no such function.
   *
   * @throws ServeException the function's {@link Awaiting#refusal()} while its image is being pulled
   */
  public synchronized Optional<ImageInfo> image(String name) {
    Deployment d = deployments.get(name);
    if (d == null && awaiting.containsKey(name)) {
      throw awaiting.get(name).refusal();
    }
    return d == null ? Optional.empty() : Optional.of(d.image);
  }

  public synchronized List<String> names() {
    List<String> names = new ArrayList<>(deployments.keySet());
    names.addAll(awaiting.keySet());
    return names;
  }

  // ---- functions whose image is still being pulled ----

  /** Why a function registered by a registry reference cannot serve yet, and its state meanwhile. */
  public interface Awaiting {
    /** What its requests get: 503 with Retry-After while the pull runs, 502 once it failed. */
    ServeException refusal();

    /** Its state for {@code GET /v1/functions/{name}}: {@code state} and the pull's progress or failure. */
    ObjectNode state();
  }

  /**
   * Lists {@code name} as a function whose image is being pulled: its requests are refused with {@code why}'s
   * {@link Awaiting#refusal()} until {@link #register} serves it. A function of that name that serves already keeps
   * serving its image until then.
   */
  public synchronized void await(String name, Awaiting why) {
    checkOpen();
    if (!deployments.containsKey(name)) {
      awaiting.put(name, why);
    }
  }

  /** The refusal a request for a function that cannot serve gets: its pull's, else 404. */
  private ServeException missing(String name) {
    Awaiting a = awaiting.get(name);
    return a != null ? a.refusal() : ServeException.notFound(name);
  }

  /** True when the function exists and a request to it can be served: an instance is up, or one fits. */
  public synchronized boolean ready(String name) {
    Deployment d = deployments.get(name);
    return d != null && !draining && factory.poisoned() == null
        && (d.liveCount() > 0 || fits(d.image) && factory.canStart());
  }

  /** Why the server can serve nothing until it restarts ({@link InstanceFactory#poisoned()}), or null: liveness. */
  public String poisoned() {
    return factory.poisoned();
  }

  /** True when every function is ready and the server is not draining. */
  public synchronized boolean ready() {
    return !draining && awaiting.isEmpty() && deployments.keySet().stream().allMatch(this::ready);
  }

  // ---- requests ----

  /**
   * Queues a request for {@code name}'s instances.
   *
   * @throws ServeException 404 for no such function, 429 when its queue is full, 503 while draining
   */
  public Pending submit(String name, FunctionRequest request) {
    return submit(name, request, ResponseStream.unstreamed());
  }

  /**
   * Queues a request whose response may stream: the function's parts reach {@code stream} as they are made, and
   * {@link Pending#cancel()} cancels it once it runs.
   *
   * @throws ServeException 404 for no such function, 429 when its queue is full, 503 while draining
   */
  public Pending submit(String name, FunctionRequest request, ResponseStream stream) {
    Pending p = enqueue(name, request, stream);
    p.sendDirect();
    return p;
  }

  private synchronized Pending enqueue(String name, FunctionRequest request, ResponseStream stream) {
    Deployment d = deployments.get(name);
    if (d == null) {
      throw missing(name);
    }
    if (draining) {
      throw new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds);
    }
    ImageDamage damage = d.damage;
    if (damage != null && d.liveCount() == 0 && !damage.retryDue()) {
      throw damage.error();
    }
    Pending p = new Pending(d, request, stream);
    Slot idle = d.idleSlot();
    if (idle != null && d.queue.isEmpty()) {
      dispatch(idle, p);
      return p;
    }
    if (d.queue.size() >= d.options.queueCapacity() + (d.startingCount() + d.startable()) * d.image.concurrency()) {
      d.meters.queueFull.increment();
      throw new ServeException(429, "queue_full", "function '" + name + "' has " + d.queue.size()
          + " requests waiting (queueCapacity " + d.options.queueCapacity() + ")", retryAfterSeconds);
    }
    d.queue.addLast(p);
    scaleOut(d);
    return p;
  }

  /** A request waiting for, or being served by, an instance. */
  public final class Pending {
    final Deployment deployment;
    final FunctionRequest request;
    final ResponseStream stream;
    final long enqueued = System.nanoTime();
    final CompletableFuture<Invocation> result = new CompletableFuture<>();
    boolean dispatched;
    /** Times it went back to its queue because its instance was gone before it was sent. */
    int resends;
    /** Set when it was dispatched to an instance that invokes asynchronously: run by the dispatching thread. */
    private Runnable direct;
    private volatile Runnable nearlyDone;
    /** The wake-ahead armed for its invoke, or null. */
    volatile java.util.concurrent.ScheduledFuture<?> wake;

    Pending(Deployment deployment, FunctionRequest request, ResponseStream stream) {
      this.deployment = deployment;
      this.request = request;
      this.stream = stream;
    }

    public CompletableFuture<Invocation> result() {
      return result;
    }

    /** Sends it to its instance from this thread, if it was dispatched to one that invokes asynchronously. */
    void sendDirect() {
      Runnable r = direct;
      direct = null;
      if (r != null) {
        r.run();
      }
    }

    /**
     * Runs {@code r} (on the scheduler's timer thread) when the request's invoke is predicted to end within the
     * wake-ahead, if it is predicted to be long (see {@link #awaitAwake()}); set it right after {@link #submit}.
     */
    public void onNearlyDone(Runnable r) {
      nearlyDone = r;
    }

    /**
     * Spins until the result is in, or for at most three times the wake-ahead: run on the thread that answers the
     * request (its event loop) from {@link #onNearlyDone}, so that the answer finds it awake. A thread that slept
     * through a long invoke wakes slowly: on the H200's virtual machine its core has halted, 0.1-0.3 ms a wake-up.
     */
    public void awaitAwake() {
      long until = System.nanoTime() + 3 * wakeAheadNanos;
      while (!result.isDone()) {
        if (System.nanoTime() - until > 0) {
          metrics.wakeMissed.increment();
          return;
        }
        Thread.onSpinWait();
      }
      metrics.wakeCaught.increment();
    }

    private void fireNearlyDone() {
      Runnable r = nearlyDone;
      if (r != null && !result.isDone()) {
        r.run();
      }
    }

    /**
     * The client went away: a queued request leaves the queue; one already running is cancelled in its function, which
     * ends it at its next step (its instance is free again when it answers).
     */
    public void cancel() {
      synchronized (Scheduler.this) {
        if (!dispatched && deployment.queue.remove(this)) {
          result.cancel(false);
          checkDrained();
          return;
        }
      }
      stream.cancel();
    }
  }

  // ---- draining ----

  /**
   * Refuses new requests (503) and completes once every queued and in-flight request has finished; instances
   * stay until {@link #close()}. Idempotent.
   */
  public synchronized CompletableFuture<Void> drain() {
    if (drained == null) {
      draining = true;
      drained = new CompletableFuture<>();
      checkDrained();
    }
    return drained;
  }

  public synchronized boolean draining() {
    return draining;
  }

  private void checkDrained() {
    if (drained == null || drained.isDone()) {
      return;
    }
    for (Deployment d : allDeployments()) {
      if (!d.queue.isEmpty() || d.slots.stream().anyMatch(Slot::busy)) {
        return;
      }
    }
    drained.complete(null);
  }

  private List<Deployment> allDeployments() {
    List<Deployment> all = new ArrayList<>(deployments.values());
    all.addAll(retiring);
    return all;
  }

  // ---- instances ----

  private final class Deployment {
    final String name;
    final FunctionOptions options;
    final ImageInfo image;
    final ArrayDeque<Pending> queue = new ArrayDeque<>();
    final List<Slot> slots = new ArrayList<>();
    final CompletableFuture<Void> retired = new CompletableFuture<>();
    final ColdStartTraces traces;
    final ServerMetrics.Function meters;
    boolean retire;
    String lastStartFailure;
    /** Its image failed an integrity check: requests are refused with this until it is registered again. */
    ImageDamage damage;
    /** When its queued requests began to wait for room (memory or an instance slot) on a device; 0: not waiting. */
    long waitingForRoom;
    /** Its warm invokes' length, smoothed: the wake-ahead's prediction; 0: none yet. */
    long invokeNanos;

    Deployment(String name, FunctionOptions options, ImageInfo image) {
      this.name = name;
      this.options = options;
      this.image = image;
      this.traces = new ColdStartTraces(tracesKept, epochNanos);
      this.meters = metrics.function(name);
    }

    /** The live instance with the most room (at least one free place), or null. */
    Slot idleSlot() {
      Slot best = null;
      for (Slot s : slots) {
        if (s.instance != null && s.running < image.concurrency() && (best == null || s.running < best.running)) {
          best = s;
        }
      }
      return best;
    }

    int startingCount() {
      return (int) slots.stream().filter(s -> s.instance == null).count();
    }

    int liveCount() {
      return (int) slots.stream().filter(s -> s.instance != null).count();
    }

    /** Instances that could still be started: seats in the queue for the requests that will wait for them. */
    int startable() {
      return Math.max(0, options.maxInstances() - slots.size());
    }
  }

  private final class Slot {
    final Deployment deployment;
    final int device;
    /** Where and how its start was placed: the devices whose links it borrows are busy until it has started. */
    final ColdStartPlacement.Choice choice;
    final ExecutorService thread;
    final long startNanos = System.nanoTime();
    FunctionInstance instance;
    /** Requests dispatched to it and not yet finished: at most its image's concurrency. */
    int running;
    boolean evicted;
    long idleSince = System.nanoTime();
    long served;

    Slot(Deployment deployment, ColdStartPlacement.Choice choice) {
      this.deployment = deployment;
      this.device = choice.device();
      this.choice = choice;
      String threadName = "thaw-fn-" + deployment.name + "-" + threadIds.incrementAndGet();
      this.thread = Executors.newSingleThreadExecutor(r -> daemon(r, threadName));
    }

    boolean busy() {
      return running > 0;
    }

    String state() {
      return instance == null ? "starting" : busy() ? "busy" : "idle";
    }
  }

  private void ensureMinimum(Deployment d) {
    while (!d.retire && !draining && d.slots.size() < d.options.minInstances()) {
      if (place(d).isEmpty()) {
        return;
      }
    }
  }

  /** Starts instances while requests wait that no starting instance will take, up to maxInstances. */
  private void scaleOut(Deployment d) {
    while (d.queue.size() > d.startingCount() * d.image.concurrency() && d.slots.size() < d.options.maxInstances()) {
      if (place(d).isEmpty()) {
        if (d.slots.isEmpty() && !fits(d.image)) {
          d.meters.noMemory.increment();
          failQueue(d, noRoom(d));
        } else if (d.slots.isEmpty() && d.waitingForRoom == 0) {
          // Busy instances hold the memory or the slots: the requests wait for one of them to finish (then it is idle
          // and can be evicted for them), at most PLACEMENT_WAIT.
          d.waitingForRoom = System.nanoTime();
        }
        return;
      }
    }
    d.waitingForRoom = 0;
  }

  private ServeException noRoom(Deployment d) {
    return new ServeException(503, "no_capacity", "function '" + d.name + "' needs " + mib(d.image.deviceBytes())
        + " of device memory" + (factory.sharedAddressSpace() ? " at its recorded addresses" : "")
        + " and an instance slot; busy instances hold " + (memoryFree(d.image) ? "every slot" : "the memory")
        + " now", retryAfterSeconds);
  }

  /**
   * Room may have freed (an instance finished or left): functions whose requests wait for it are placed, the one
   * that has waited longest first.
   */
  private void placeWaiting() {
    List<Deployment> waiting = new ArrayList<>();
    for (Deployment d : deployments.values()) {
      if (d.waitingForRoom != 0) {
        waiting.add(d);
      }
    }
    waiting.sort(Comparator.comparingLong(d -> d.waitingForRoom));
    for (Deployment d : waiting) {
      scaleOut(d);
    }
  }

  /** Requests that waited {@link #PLACEMENT_WAIT} for room get 503; the rest wait on. */
  private void expireWaiting(long now) {
    for (Deployment d : deployments.values()) {
      if (d.waitingForRoom != 0 && now - d.waitingForRoom > PLACEMENT_WAIT.toNanos() && d.slots.isEmpty()) {
        d.waitingForRoom = 0;
        d.meters.noMemory.increment();
        failQueue(d, noRoom(d));
      }
    }
  }

  /**
   * Places and starts one instance of {@code d} where the factory prices its start cheapest ({@link #choose}),
   * evicting idle instances of other functions if it fits nowhere.
   */
  private Optional<Slot> place(Deployment d) {
    Optional<ColdStartPlacement.Choice> choice = choose(d.image);
    if (choice.isEmpty()) {
      for (Slot victim : evictionCandidates(d)) {
        evict(victim);
        victim.deployment.meters.evicted("memory");
        choice = choose(d.image);
        if (choice.isPresent()) {
          break;
        }
      }
    }
    if (choice.isEmpty()) {
      return Optional.empty();
    }
    Slot slot = new Slot(d, choice.get());
    int device = slot.device;
    d.slots.add(slot);
    reserved[device] += d.image.deviceBytes();
    placed[device]++;
    slot.thread.execute(() -> start(slot));
    return Optional.of(slot);
  }

  /**
   * Where a start of {@code image} goes and by which way in ({@link InstanceFactory#place}), over every device as this
   * scheduler sees it: whether the image fits its budget and instance slots, its free budget, whether it is busy
   * ({@link #busy}), and what the factory keeps of the image there. Empty when it fits nowhere now.
   */
  private Optional<ColdStartPlacement.Choice> choose(ImageInfo image) {
    if (overlapsResident(image)) {
      return Optional.empty();
    }
    List<ColdStartPlacement.DeviceView> views = new ArrayList<>(budget.length);
    for (int i = 0; i < budget.length; i++) {
      long free = budget[i] - reserved[i];
      boolean fits = free >= image.deviceBytes() && placed[i] < factory.maxInstances(i);
      views.add(new ColdStartPlacement.DeviceView(i, fits, free, busy(i), factory.residentBytes(image.tag(), i)));
    }
    return factory.place(image.tag(), image.deviceBytes(), views).filter(c -> views.get(c.device()).fits());
  }

  /**
   * True when device {@code device} is doing something a start elsewhere must not slow down by borrowing its link: an
   * instance there is starting or serving a request, has served one within {@link #RECENTLY_BUSY_NANOS} (more are
   * likely on their way), or a start in progress borrows its link already.
   */
  private boolean busy(int device) {
    long now = System.nanoTime();
    for (Deployment d : allDeployments()) {
      for (Slot s : d.slots) {
        boolean starting = s.instance == null;
        if (s.device == device && (starting || s.busy() || s.served > 0 && now - s.idleSince < RECENTLY_BUSY_NANOS)
            || starting && s.choice.helpers().contains(device)) {
          return true;
        }
      }
    }
    return false;
  }

  /** True if some device has the memory for {@code image} now, slots aside. */
  private boolean memoryFree(ImageInfo image) {
    for (int i = 0; i < budget.length; i++) {
      if (budget[i] - reserved[i] >= image.deviceBytes()) {
        return true;
      }
    }
    return false;
  }

  private boolean fits(ImageInfo image) {
    if (fittingDevice(image) >= 0) {
      return true;
    }
    for (int i = 0; i < budget.length; i++) {
      if (image.deviceBytes() <= budget[i]) {
        return true;
      }
    }
    return false;
  }

  /** A device {@code image} fits now (budget and instance slots), or -1. */
  private int fittingDevice(ImageInfo image) {
    if (overlapsResident(image)) {
      return -1;
    }
    for (int i = 0; i < budget.length; i++) {
      if (budget[i] - reserved[i] >= image.deviceBytes() && placed[i] < factory.maxInstances(i)) {
        return i;
      }
    }
    return -1;
  }

  /** In one address space, an instance of another image whose recorded addresses overlap {@code image}'s. */
  private boolean overlapsResident(ImageInfo image) {
    if (factory.sharedAddressSpace()) {
      for (Deployment other : allDeployments()) {
        if (!other.slots.isEmpty() && image.overlaps(other.image)) {
          return true;
        }
      }
    }
    return false;
  }

  /** Idle instances of other functions, least recently used first. */
  private List<Slot> evictionCandidates(Deployment d) {
    List<Slot> idle = new ArrayList<>();
    for (Deployment other : allDeployments()) {
      if (other != d) {
        other.slots.stream().filter(s -> s.instance != null && !s.busy()).forEach(idle::add);
      }
    }
    idle.sort(Comparator.comparingLong(s -> s.idleSince));
    return idle;
  }

  private void start(Slot slot) {
    Deployment d = slot.deployment;
    FunctionInstance instance;
    try {
      instance = factory.startBlocking(d.image.tag(), d.image.manifest(), slot.choice);
    } catch (Exception | Error e) {
      synchronized (this) {
        startFailed(slot, e);
      }
      return;
    }
    List<Pending> first;
    synchronized (this) {
      if (slot.evicted || closed) {
        closeOnThread(slot, instance);
        return;
      }
      slot.instance = instance;
      slot.idleSince = System.nanoTime();
      d.lastStartFailure = null;
      d.damage = null;
      instance.lost().thenAccept(why -> lost(slot, why));
      StartPhases p = instance.startPhases();
      metrics.recordPhase("acquire", "cold", p.acquireMillis());
      metrics.recordPhase("map", "cold", p.mapMillis());
      metrics.recordPhase("restore-wait", "cold", p.restoreMillis());
      d.meters.restored(p.tier(), p.restoredBytes());
      first = next(slot);
    }
    first.forEach(Pending::sendDirect);
  }

  /**
   * An instance that ended on its own (its worker died while idle) leaves at once, so the next request starts a
   * fresh one instead of failing on it; one serving a request is left to that request's end.
   */
  private synchronized void lost(Slot slot, String why) {
    if (slot.evicted || slot.busy() || closed) {
      return;
    }
    Deployment d = slot.deployment;
    LOG.warn("{}: instance on device {} lost while idle: {}", d.name, slot.device, why);
    evict(slot);
    d.meters.evicted("lost");
    ensureMinimum(d);
    scaleOut(d);
    placeWaiting();
  }

  private void startFailed(Slot slot, Throwable e) {
    Deployment d = slot.deployment;
    removeSlot(slot);
    slot.thread.shutdown();
    d.lastStartFailure = String.valueOf(e.getMessage());
    d.meters.startFailures.increment();
    ImageDamage damage = ImageDamage.of(d.image.tag(), e);
    if (damage != null) {
      damaged(d, damage);
    } else if (d.slots.isEmpty()) {
      failQueue(d, e instanceof ServeException refused ? refused : e instanceof CudaOutOfMemoryException
          ? new ServeException(503, "no_capacity", "function '" + d.name + "' does not fit on the device now: "
              + e.getMessage(), retryAfterSeconds)
          : new ServeException(500, "start_failed", "function '" + d.name + "' could not start: " + e.getMessage()));
    } else {
      scaleOut(d);
    }
    placeWaiting();
    finishRetire(d);
    checkDrained();
  }

  /**
   * The function's image failed its integrity check (a chunk whose bytes do not match its digest): every waiting
   * request gets the same 500 naming the image and the chunk, and so does every new one until the function is
   * registered again or {@link ImageDamage#RETRY_AFTER} has passed (then one start is tried again) — never a new
   * worker per request.
   */
  private void damaged(Deployment d, ImageDamage damage) {
    if (d.damage == null) {
      LOG.error("{}: {}", d.name, damage.message());
    }
    d.damage = damage;
    failQueue(d, damage.error());
  }

  private void failQueue(Deployment d, ServeException e) {
    Pending p;
    while ((p = d.queue.pollFirst()) != null) {
      p.result.completeExceptionally(e);
    }
    checkDrained();
  }

  /**
   * Gives the request to the slot's instance: on the instance's own thread, or, when the instance invokes
   * asynchronously (a worker: the invoke only writes to its pipe), from the dispatching thread once it left the
   * monitor ({@link Pending#sendDirect}), saving a thread hop.
   */
  private void dispatch(Slot slot, Pending p) {
    slot.running++;
    p.dispatched = true;
    boolean cold = slot.served == 0;
    slot.served++;
    invoking++;
    if (!cold && !p.stream.streamed()) {
      armWakeAhead(p);
    }
    if (slot.instance.invokesAsync()) {
      p.direct = () -> run(slot, p, cold);
    } else {
      slot.thread.execute(() -> run(slot, p, cold));
    }
  }

  /**
   * When the request's function has been taking at least 1 ms and twice the wake-ahead, and few instances invoke now
   * (a busy server's threads do not sleep long; spinning would take cores from the requests), fires
   * {@link Pending#onNearlyDone} the wake-ahead before its invoke is predicted to end.
   */
  private void armWakeAhead(Pending p) {
    long predicted = p.deployment.invokeNanos;
    if (wakeAheadNanos == 0 || predicted < Math.max(1_000_000, 2 * wakeAheadNanos)
        || invoking > WAKE_AHEAD_MAX_INVOKING) {
      return;
    }
    if (waker == null) {
      java.util.concurrent.ScheduledThreadPoolExecutor w = new java.util.concurrent.ScheduledThreadPoolExecutor(1,
          r -> daemon(r, "thaw-server-wake-ahead"));
      w.setRemoveOnCancelPolicy(true);
      waker = w;
    }
    p.wake = waker.schedule(p::fireNearlyDone, predicted - wakeAheadNanos, TimeUnit.NANOSECONDS);
  }

  private void run(Slot slot, Pending p, boolean cold) {
    long invokeStart = System.nanoTime();
    CompletableFuture<FunctionInstance.Invoked> served;
    try {
      served = slot.instance.invoke(p.request, p.stream);
    } catch (Exception | Error e) {
      served = CompletableFuture.failedFuture(e);
    }
    // Finished on the thread that completes it (a worker's answer: the pool's reader), not back on this one.
    served.whenComplete((r, e) -> finish(slot, p, cold, invokeStart, r, e));
  }

  private void finish(Slot slot, Pending p, boolean cold, long invokeStart, FunctionInstance.Invoked invoked,
      Throwable failed) {
    long done = System.nanoTime();
    Throwable failure = failed instanceof CompletionException && failed.getCause() != null ? failed.getCause()
        : failed;
    if (failure instanceof InstanceLostException && retryElsewhere(slot, p)) {
      return;
    }
    String start = cold ? "cold" : "warm";
    Map<String, Double> phases = new LinkedHashMap<>();
    StartPhases sp = slot.instance.startPhases();
    double waited = (invokeStart - p.enqueued) / 1e6;
    if (cold) {
      // The request waited for the start it triggered (or a part of it); the rest of the wait was queueing.
      double startedWithin = Math.min(sp.totalMillis(), waited);
      phases.put("queue", waited - startedWithin);
      phases.put("acquire", sp.acquireMillis());
      phases.put("map", sp.mapMillis());
      phases.put("restore-wait", sp.restoreMillis());
    } else {
      phases.put("queue", waited);
    }
    phases.put("invoke", (done - invokeStart) / 1e6);
    metrics.recordPhase("queue", start, phases.get("queue"));
    metrics.recordPhase("invoke", start, phases.get("invoke"));
    p.deployment.meters.invoked(cold, failure == null, (done - p.enqueued) / 1e6);
    if (cold) {
      Map<String, Double> startPhases = new LinkedHashMap<>(phases);
      startPhases.remove("queue");
      startPhases.remove("invoke");
      ColdStartTraces traces = p.deployment.traces;
      ArrayNode coldStart = traces.record(p.deployment.name, slot.device, p.enqueued, Math.max(slot.startNanos, p.enqueued),
          startPhases, invokeStart, done);
      slot.instance.restoreTimeline().thenAccept(t -> {
        if (t != null) {
          traces.attach(coldStart, t.chromeTrace(), t.originNanos());
        }
      });
    }
    if (p.wake != null) {
      p.wake.cancel(false);
    }
    List<Pending> following = List.of();
    synchronized (this) {
      slot.running--;
      slot.idleSince = done;
      invoking--;
      if (!cold && failure == null) {
        long before = p.deployment.invokeNanos;
        long took = done - invokeStart;
        p.deployment.invokeNanos = before == 0 ? took : before + (took - before) / 4;
      }
      ImageDamage damage = failure == null ? null : ImageDamage.of(p.deployment.image.tag(), failure);
      if (failure == null) {
        p.result.complete(new Invocation(p.deployment.name, invoked.response(), cold, phases,
            slot.instance.describe(), cold ? sp.tier() : null, invoked.functionMillis()));
      } else {
        p.result.completeExceptionally(damage != null ? damage.error() : failure);
      }
      if (damage != null) {
        damaged(p.deployment, damage);
      }
      if (!slot.instance.healthy()) {
        evict(slot);
        slot.deployment.meters.evicted("unhealthy");
        scaleOut(slot.deployment);
      } else {
        following = next(slot);
      }
      if (following == null) {
        placeWaiting();
      }
      checkDrained();
    }
    following.forEach(Pending::sendDirect);
  }

  /**
   * A request whose instance was gone before anything of it was sent goes back to the head of its queue and another
   * instance serves it (at most {@link #RESENDS} times); false when it has been resent enough, and fails.
   */
  private boolean retryElsewhere(Slot slot, Pending p) {
    synchronized (this) {
      if (p.resends >= RESENDS) {
        return false;
      }
      p.resends++;
      slot.running--;
      invoking--;
      evict(slot);
      slot.deployment.meters.evicted("lost");
      p.dispatched = false;
      slot.deployment.queue.addFirst(p);
      scaleOut(slot.deployment);
    }
    if (p.wake != null) {
      p.wake.cancel(false);
    }
    return true;
  }

  /**
   * The slot has room: it takes requests from the head of its function's queue while it has room (returned: the caller
   * sends them), or idles.
   */
  private List<Pending> next(Slot slot) {
    Deployment d = slot.deployment;
    List<Pending> taken = new ArrayList<>(1);
    Pending p;
    while (slot.running < d.image.concurrency() && (p = d.queue.pollFirst()) != null) {
      dispatch(slot, p);
      taken.add(p);
    }
    if (!slot.busy()) {
      finishRetire(d);
      if (d.retire) {
        evict(slot);
      }
    }
    return taken;
  }

  private void evict(Slot slot) {
    removeSlot(slot);
    if (slot.instance != null) {
      closeOnThread(slot, slot.instance);
    }
  }

  private void removeSlot(Slot slot) {
    if (!slot.evicted) {
      slot.evicted = true;
      slot.deployment.slots.remove(slot);
      reserved[slot.device] -= slot.deployment.image.deviceBytes();
      placed[slot.device]--;
    }
  }

  private void closeOnThread(Slot slot, FunctionInstance instance) {
    slot.thread.execute(() -> {
      try {
        instance.close();
      } catch (RuntimeException e) {
        metrics.closeFailures.increment();
      }
    });
    slot.thread.shutdown();
  }

  private void retire(Deployment d) {
    d.retire = true;
    retiring.add(d);
    for (Slot s : List.copyOf(d.slots)) {
      if (s.instance != null && !s.busy()) {
        evict(s);
      }
    }
    finishRetire(d);
  }

  private void finishRetire(Deployment d) {
    if (d.retire && d.queue.isEmpty() && d.slots.stream().noneMatch(Slot::busy)) {
      for (Slot s : List.copyOf(d.slots)) {
        evict(s);
      }
      if (d.slots.isEmpty() && retiring.remove(d)) {
        if (named(d.name).isEmpty()) {
          metrics.remove(d.name);
        }
        d.retired.complete(null);
      }
    }
  }

  /** Evicts idle instances past their keepAlive, above minInstances. */
  private synchronized void reap() {
    if (closed) {
      return;
    }
    long now = System.nanoTime();
    expireWaiting(now);
    for (Deployment d : List.copyOf(deployments.values())) {
      for (Slot s : List.copyOf(d.slots)) {
        if (d.slots.size() <= d.options.minInstances()) {
          break;
        }
        if (s.instance != null && !s.busy() && now - s.idleSince >= d.options.keepAlive().toNanos()) {
          evict(s);
          d.meters.evicted("keep_alive");
        }
      }
      ensureMinimum(d);
    }
    placeWaiting();
  }

  /** Instances of every function named {@code name} (one being replaced included) in {@code state}: a gauge. */
  private synchronized int instanceCount(String name, String state) {
    int n = 0;
    for (Deployment d : named(name)) {
      n += (int) d.slots.stream().filter(s -> s.state().equals(state)).count();
    }
    return n;
  }

  /** Requests waiting for an instance of {@code name} (one being replaced included): a gauge. */
  private synchronized int queueDepth(String name) {
    return named(name).stream().mapToInt(d -> d.queue.size()).sum();
  }

  /** The deployments named {@code name}: the current one and those retiring; one lookup, not a walk of all. */
  private List<Deployment> named(String name) {
    List<Deployment> named = new ArrayList<>(1);
    Deployment current = deployments.get(name);
    if (current != null) {
      named.add(current);
    }
    for (Deployment d : retiring) {
      if (d.name.equals(name)) {
        named.add(d);
      }
    }
    return named;
  }

  // ---- what GET shows ----

  /** A function's state for {@code GET /v1/functions/{name}}. */
  public synchronized ObjectNode status(String name) {
    Deployment d = deployments.get(name);
    if (d == null && awaiting.containsKey(name)) {
      ObjectNode s = NODES.objectNode();
      s.put("name", name);
      s.setAll(awaiting.get(name).state());
      s.put("ready", false);
      s.putArray("instances");
      return s;
    }
    if (d == null) {
      throw ServeException.notFound(name);
    }
    ObjectNode s = NODES.objectNode();
    s.put("name", name);
    s.set("options", d.options.toJson());
    s.put("state", d.liveCount() > 0 ? "warm" : d.startingCount() > 0 ? "starting" : "cold");
    s.put("ready", ready(name));
    s.put("function", d.image.manifest().function().className());
    s.put("deviceBytes", d.image.deviceBytes());
    s.put("queued", d.queue.size());
    JsonNode imageTiers = factory.imageState(d.image.tag());
    if (imageTiers != null) {
      s.set("image", imageTiers);
    }
    if (d.lastStartFailure != null) {
      s.put("lastStartFailure", d.lastStartFailure);
    }
    ArrayNode instances = s.putArray("instances");
    for (Slot slot : d.slots) {
      ObjectNode i = instances.addObject();
      i.put("state", slot.state());
      i.put("device", slot.device);
      i.put("served", slot.served);
      i.put("running", slot.running);
      if (slot.instance != null) {
        StartPhases p = slot.instance.startPhases();
        i.put("runs", slot.instance.describe());
        i.put("tier", p.tier());
        ObjectNode start = i.putObject("startMillis");
        start.put("acquire", p.acquireMillis());
        start.put("map", p.mapMillis());
        start.put("restore-wait", p.restoreMillis());
      }
    }
    s.set("signature", Signatures.json(d.image.signature()));
    return s;
  }

  public synchronized ObjectNode trace(String name) {
    Deployment d = deployments.get(name);
    if (d == null) {
      throw missing(name);
    }
    return d.traces.json();
  }

  /** Instances alive now, starting ones included, across all functions: for leak checks. */
  public synchronized int instanceCount() {
    return allDeployments().stream().mapToInt(d -> d.slots.size()).sum();
  }

  // ---- shutdown ----

  /** Evicts every instance and waits (up to {@code timeout}) for their closes. Queued requests fail with 503. */
  @Override
  public void close() {
    List<ExecutorService> threads = new ArrayList<>();
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      draining = true;
      for (Deployment d : allDeployments()) {
        failQueue(d, new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds));
        for (Slot s : List.copyOf(d.slots)) {
          threads.add(s.thread);
          evict(s);
          s.thread.shutdown();
        }
      }
      metrics.removeAll();
      deployments.clear();
      awaiting.clear();
      retiring.clear();
    }
    reaper.shutdownNow();
    synchronized (this) {
      if (waker != null) {
        waker.shutdownNow();
      }
    }
    for (ExecutorService t : threads) {
      try {
        t.awaitTermination(30, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  private void checkOpen() {
    if (closed) {
      throw new IllegalStateException("the scheduler is closed");
    }
  }

  private static String mib(long bytes) {
    return String.format(java.util.Locale.ROOT, "%.1f MiB", bytes / (double) (1 << 20));
  }

  private static Thread daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    return t;
  }
}
