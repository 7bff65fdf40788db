package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServeException;
import dev.thaw.server.spi.FunctionInstance;
import dev.thaw.server.spi.InstanceFactory;
import dev.thaw.server.spi.InstanceLostException;
import dev.thaw.server.spi.StartPhases;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
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
 * function's queue, or straight to an instance with room when the queue is empty; a device's reserved bytes are the sum
 * of the footprints of the instances placed on it (starting ones included; {@link DevicePlacement} keeps it). Every
 * instance's start, invokes and close run on that instance's own thread, never on an event loop and never under the
 * monitor — except the invoke of an instance that {@link FunctionInstance#invokesAsync() invokes asynchronously} (a
 * worker process), which the dispatching thread makes once it left the monitor; a request is finished on the thread
 * that completes its invoke.
 *
 * <p>This class keeps the queues, the dispatch and the instances' life cycle; the other jobs are classes of their own,
 * and every arrow between them runs one way (none calls back into a class that calls it):
 * <pre>
 *   Scheduler ─┬─> DevicePlacement ──> Deployments     device budgets; where a start goes; evictions for room
 *              ├─> Deployments                         the deployment of each name, and the retiring ones
 *              ├─> WakeAhead                           the wake-ahead timer and spin
 *              ├─> RequestPhases                       a request's phases in the meters and the cold-start traces
 *              └─> FunctionStatus                      the JSON that GET shows
 * </pre>
 * {@link Deployment} (a function's queue and instances) and {@link InstanceSlot} (one instance and the requests it
 * serves) are the records they share. They take no lock of their own: all but {@link RequestPhases}, which is
 * thread-safe, are used only under this object's monitor.
 */
public final class Scheduler implements AutoCloseable {

  static final long REAP_PERIOD_MILLIS = 100;
  /** How often a request whose instance was gone before it was sent goes to another one. */
  static final int RESENDS = 2;
  /** How long requests wait for busy instances to leave room before they get 503. */
  static final Duration PLACEMENT_WAIT = Duration.ofSeconds(30);
  private static final Logger LOG = LoggerFactory.getLogger(Scheduler.class);

  private final InstanceFactory factory;
  private final ServerMetrics metrics;
  private final RequestPhases requestPhases;
  private final long retryAfterSeconds;
  private final int tracesKept;
  private final long epochNanos = System.nanoTime();
  private final Deployments deployments = new Deployments();
  /** Functions registered by a registry reference whose image is still being pulled (none of them deployed). */
  private final Map<String, Awaiting> awaiting = new LinkedHashMap<>();
  /**
   * The serving deployments whose requests wait for room, in the order they began to wait: what {@link #placeWaiting}
   * and {@link #expireWaiting} look at, so a request's end costs nothing when none waits (not a walk of every
   * function).
   */
  private final Set<Deployment> waitingForRoom = new LinkedHashSet<>();
  private final DevicePlacement placement;
  private final WakeAhead wakeAhead;
  private final ScheduledExecutorService reaper;
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
    this.metrics = new ServerMetrics(metrics, this::instanceCount, this::queueDepth);
    this.requestPhases = new RequestPhases(this.metrics);
    this.wakeAhead = new WakeAhead(wakeAhead, this.metrics);
    this.retryAfterSeconds = Math.max(1, (retryAfter.toMillis() + 999) / 1000);
    this.tracesKept = tracesKept;
    this.placement = new DevicePlacement(factory, deployments, gpuMemoryBytes, this.metrics.closeFailures);
    for (int i = 0; i < placement.devices(); i++) {
      int d = i;
      this.metrics.device(d, () -> placement.budget(d), () -> reserved(d));
    }
    this.reaper = Executors.newSingleThreadScheduledExecutor(Threads.daemonFactory("thaw-server-reaper"));
    reaper.scheduleWithFixedDelay(this::reap, REAP_PERIOD_MILLIS, REAP_PERIOD_MILLIS, TimeUnit.MILLISECONDS);
  }

  public InstanceFactory factory() {
    return factory;
  }

  private synchronized long reserved(int device) {
    return placement.reserved(device);
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
      throw shuttingDown();
    }
    if (image.ranks() > 1 && !factory.servesGroups()) {
      throw new ServeException(400, "unsupported", "image '" + image.tag() + "' is a group of " + image.ranks()
          + " ranks, which only pool-backed instances serve (this server's are " + factory.name() + ")");
    }
    if (image.ranks() > factory.devices().size()) {
      throw new ServeException(400, "no_capacity", "image '" + image.tag() + "' is a group of " + image.ranks()
          + " ranks, each on a device of its own, and this node has " + factory.devices().size() + " device(s)");
    }
    awaiting.remove(name);
    Deployment d = new Deployment(name, new FunctionOptions(options), image,
        new ColdStartTraces(tracesKept, epochNanos), metrics.function(name));
    Deployment old = deployments.put(d);
    if (old != null) {
      // After the new one is in: the name's meters stay (counters go on counting) while the old one retires.
      retire(old);
    }
    if (image.group() != null) {
      factory.prepareGroup(image.tag(), image.group());
    } else {
      factory.prepare(image.tag(), image.manifest());
    }
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
    if (!deployments.servesImage(tag)) {
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
    List<String> names = new ArrayList<>(deployments.names());
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
    if (!deployments.serves(name)) {
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
        && (d.liveCount() > 0 || placement.fits(d.image) && factory.canStart());
  }

  /** Why the server can serve nothing until it restarts ({@link InstanceFactory#poisoned()}), or null: liveness. */
  public String poisoned() {
    return factory.poisoned();
  }

  /** True when every function is ready and the server is not draining. */
  public synchronized boolean ready() {
    return !draining && awaiting.isEmpty() && deployments.names().stream().allMatch(this::ready);
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

  /** Dispatches the request straight to an instance with room when none waits before it, else queues it. */
  private synchronized Pending enqueue(String name, FunctionRequest request, ResponseStream stream) {
    Deployment d = admitting(name);
    Pending p = new Pending(d, request, stream);
    InstanceSlot idle = d.idleSlot();
    if (idle != null && d.queue.isEmpty()) {
      dispatch(idle, p);
      return p;
    }
    checkQueueRoom(d);
    d.queue.addLast(p);
    scaleOut(d);
    return p;
  }

  /**
   * The deployment serving {@code name}, when it takes requests now.
   *
   * @throws ServeException 404 (or its pull's refusal) for no such function, 503 while draining, its image's damage
   *     until a start may be tried again
   */
  private Deployment admitting(String name) {
    Deployment d = deployments.get(name);
    if (d == null) {
      throw missing(name);
    }
    if (draining) {
      throw shuttingDown();
    }
    ImageDamage damage = d.damage;
    if (damage != null && d.liveCount() == 0 && !damage.retryDue()) {
      throw damage.error();
    }
    return d;
  }

  /**
   * Refuses a request to a full queue: one holds {@code queueCapacity} requests plus a seat for each that a starting
   * instance, or one that may still be started, will take.
   *
   * @throws ServeException 429 when {@code d}'s queue is full
   */
  private void checkQueueRoom(Deployment d) {
    if (d.queue.size() >= d.options.queueCapacity() + (d.startingCount() + d.startable()) * d.image.concurrency()) {
      d.meters.queueFull.increment();
      throw new ServeException(429, "queue_full", "function '" + d.name + "' has " + d.queue.size()
          + " requests waiting (queueCapacity " + d.options.queueCapacity() + ")", retryAfterSeconds);
    }
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
    volatile ScheduledFuture<?> wake;

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
      wakeAhead.awaitAwake(result);
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
    for (Deployment d : deployments.all()) {
      if (d.active()) {
        return;
      }
    }
    drained.complete(null);
  }

  private ServeException shuttingDown() {
    return new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds);
  }

  // ---- instances ----

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
        if (d.slots.isEmpty() && !placement.fits(d.image)) {
          d.meters.noMemory.increment();
          failQueue(d, placement.noRoom(d, retryAfterSeconds));
        } else if (d.slots.isEmpty() && d.waitingForRoom == 0) {
          // Busy instances hold the memory or the slots: the requests wait for one of them to finish (then it is idle
          // and can be evicted for them), at most PLACEMENT_WAIT.
          d.waitingForRoom = System.nanoTime();
          waitingForRoom.add(d);
        }
        return;
      }
    }
    d.waitingForRoom = 0;
    waitingForRoom.remove(d);
  }

  /**
   * Room may have freed (an instance finished or left): functions whose requests wait for it are placed, the one
   * that has waited longest first.
   */
  private void placeWaiting() {
    if (waitingForRoom.isEmpty()) {
      return;
    }
    for (Deployment d : List.copyOf(waitingForRoom)) {
      scaleOut(d);
    }
  }

  /** Requests that waited {@link #PLACEMENT_WAIT} for room get 503; the rest wait on. */
  private void expireWaiting(long now) {
    for (Deployment d : List.copyOf(waitingForRoom)) {
      if (now - d.waitingForRoom > PLACEMENT_WAIT.toNanos() && d.slots.isEmpty()) {
        d.waitingForRoom = 0;
        waitingForRoom.remove(d);
        d.meters.noMemory.increment();
        failQueue(d, placement.noRoom(d, retryAfterSeconds));
      }
    }
  }

  /**
   * Places and starts one instance of {@code d} where the factory prices its start cheapest, evicting idle instances
   * of other functions if it fits nowhere ({@link DevicePlacement#chooseMakingRoom}).
   */
  private Optional<InstanceSlot> place(Deployment d) {
    String thread = "thaw-fn-" + d.name + "-" + threadIds.incrementAndGet();
    InstanceSlot slot;
    if (d.image.group() != null) {
      Optional<List<Integer>> devices = placement.chooseGroupMakingRoom(d);
      if (devices.isEmpty()) {
        return Optional.empty();
      }
      slot = new InstanceSlot(d, new ColdStartPlacement.Choice(devices.get().get(0),
          ColdStartPlacement.Source.HOST_CACHE, -1, 0), devices.get(), thread);
    } else {
      Optional<ColdStartPlacement.Choice> choice = placement.chooseMakingRoom(d);
      if (choice.isEmpty()) {
        return Optional.empty();
      }
      slot = new InstanceSlot(d, choice.get(), thread);
    }
    placement.reserve(slot);
    slot.thread.execute(() -> start(slot));
    return Optional.of(slot);
  }

  /** Runs on the slot's thread: starts its instance, which then takes the requests waiting for it. */
  private void start(InstanceSlot slot) {
    Deployment d = slot.deployment;
    FunctionInstance instance;
    try {
      instance = d.image.group() != null ? factory.startGroupBlocking(d.image.tag(), d.image.group(), slot.devices)
          : factory.startBlocking(d.image.tag(), d.image.manifest(), slot.choice);
    } catch (Exception | Error e) {
      synchronized (this) {
        startFailed(slot, e);
      }
      return;
    }
    List<Pending> first;
    synchronized (this) {
      if (slot.evicted || closed) {
        slot.closeOnThread(instance, metrics.closeFailures);
        return;
      }
      first = started(slot, instance);
    }
    first.forEach(Pending::sendDirect);
  }

  /** The slot's instance is up: it serves from now on; returns the requests it took (the caller sends them). */
  private List<Pending> started(InstanceSlot slot, FunctionInstance instance) {
    Deployment d = slot.deployment;
    slot.instance = instance;
    slot.idleSince = System.nanoTime();
    d.lastStartFailure = null;
    d.damage = null;
    instance.lost().thenAccept(why -> lost(slot, why));
    requestPhases.started(d, instance.startPhases());
    return next(slot);
  }

  /**
   * An instance that ended on its own (its worker died while idle) leaves at once, so the next request starts a
   * fresh one instead of failing on it; one serving a request is left to that request's end.
   */
  private synchronized void lost(InstanceSlot slot, String why) {
    if (slot.evicted || slot.busy() || closed) {
      return;
    }
    Deployment d = slot.deployment;
    LOG.warn("{}: instance on device {} lost while idle: {}", d.name, slot.device, why);
    placement.evict(slot);
    d.meters.evicted("lost");
    ensureMinimum(d);
    scaleOut(d);
    placeWaiting();
  }

  private void startFailed(InstanceSlot slot, Throwable e) {
    Deployment d = slot.deployment;
    placement.release(slot);
    slot.thread.shutdown();
    d.lastStartFailure = String.valueOf(e.getMessage());
    d.meters.startFailures.increment();
    ImageDamage damage = ImageDamage.of(d.image.tag(), e);
    if (damage != null) {
      damaged(d, damage);
    } else if (d.slots.isEmpty()) {
      failQueue(d, startRefusal(d, e));
    } else {
      scaleOut(d);
    }
    placeWaiting();
    finishRetire(d);
    checkDrained();
  }

  /** What the requests waiting for a start that failed with {@code e}, and no other instance, get. */
  private ServeException startRefusal(Deployment d, Throwable e) {
    if (e instanceof ServeException refused) {
      return refused;
    }
    if (e instanceof CudaOutOfMemoryException) {
      return new ServeException(503, "no_capacity", "function '" + d.name + "' does not fit on the device now: "
          + e.getMessage(), retryAfterSeconds);
    }
    return new ServeException(500, "start_failed", "function '" + d.name + "' could not start: " + e.getMessage());
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
   * monitor ({@link Pending#sendDirect}), saving a thread hop. A warm request that is not streamed may be woken ahead
   * of its predicted end ({@link WakeAhead}).
   */
  private void dispatch(InstanceSlot slot, Pending p) {
    slot.running++;
    p.dispatched = true;
    boolean cold = slot.served == 0;
    slot.served++;
    wakeAhead.invokeStarted();
    if (!cold && !p.stream.streamed()) {
      ScheduledFuture<?> wake = wakeAhead.arm(p.deployment.invokeNanos, p::fireNearlyDone);
      if (wake != null) {
        p.wake = wake;
      }
    }
    if (slot.instance.invokesAsync()) {
      p.direct = () -> run(slot, p, cold);
    } else {
      slot.thread.execute(() -> run(slot, p, cold));
    }
  }

  private void run(InstanceSlot slot, Pending p, boolean cold) {
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

  /**
   * The request's invoke ended: it is recorded outside the monitor ({@link RequestPhases}), then, under it, completed,
   * and its instance takes the next requests (returned to this thread, which sends them) or is evicted if unhealthy.
   */
  private void finish(InstanceSlot slot, Pending p, boolean cold, long invokeStart, FunctionInstance.Invoked invoked,
      Throwable failed) {
    long done = System.nanoTime();
    Throwable failure = failed instanceof CompletionException && failed.getCause() != null ? failed.getCause()
        : failed;
    if (failure instanceof InstanceLostException && retryElsewhere(slot, p)) {
      return;
    }
    StartPhases sp = slot.instance.startPhases();
    Map<String, Double> phases = RequestPhases.of(p.enqueued, cold, sp, invokeStart, done);
    requestPhases.invoked(slot, p.enqueued, cold, phases, failure == null, invokeStart, done);
    if (p.wake != null) {
      p.wake.cancel(false);
    }
    List<Pending> following;
    synchronized (this) {
      invokeEnded(slot, p, cold, done, done - invokeStart, failure == null);
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
      following = afterInvoke(slot);
      if (following.isEmpty()) {
        // The slot went idle or was evicted: a function waiting for room may take it now, not at the next reap.
        placeWaiting();
      }
      checkDrained();
    }
    following.forEach(Pending::sendDirect);
  }

  /**
   * One of the slot's requests ended {@code tookNanos} after its invoke began: its place in the slot is free, and a
   * warm one that succeeded teaches its function's wake-ahead prediction (a smoothed mean) how long an invoke takes.
   */
  private void invokeEnded(InstanceSlot slot, Pending p, boolean cold, long done, long tookNanos, boolean ok) {
    slot.running--;
    slot.idleSince = done;
    wakeAhead.invokeEnded();
    if (!cold && ok) {
      long before = p.deployment.invokeNanos;
      p.deployment.invokeNanos = before == 0 ? tookNanos : before + (tookNanos - before) / 4;
    }
  }

  /**
   * After a request: an unhealthy instance is evicted (and another started for its queue); a healthy one takes the
   * next requests, returned for the caller to send.
   */
  private List<Pending> afterInvoke(InstanceSlot slot) {
    if (!slot.instance.healthy()) {
      placement.evict(slot);
      slot.deployment.meters.evicted("unhealthy");
      scaleOut(slot.deployment);
      return List.of();
    }
    return next(slot);
  }

  /**
   * A request whose instance was gone before anything of it was sent goes back to the head of its queue and another
   * instance serves it (at most {@link #RESENDS} times); false when it has been resent enough, and fails.
   */
  private boolean retryElsewhere(InstanceSlot slot, Pending p) {
    synchronized (this) {
      if (p.resends >= RESENDS) {
        return false;
      }
      p.resends++;
      slot.running--;
      wakeAhead.invokeEnded();
      placement.evict(slot);
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
  private List<Pending> next(InstanceSlot slot) {
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
        placement.evict(slot);
      }
    }
    return taken;
  }

  private void retire(Deployment d) {
    d.retire = true;
    // Only serving deployments are placed for room.
    waitingForRoom.remove(d);
    deployments.retiring(d);
    for (InstanceSlot s : List.copyOf(d.slots)) {
      if (s.instance != null && !s.busy()) {
        placement.evict(s);
      }
    }
    finishRetire(d);
  }

  private void finishRetire(Deployment d) {
    if (d.retire && !d.active()) {
      for (InstanceSlot s : List.copyOf(d.slots)) {
        placement.evict(s);
      }
      if (d.slots.isEmpty() && deployments.retired(d)) {
        if (deployments.named(d.name).isEmpty()) {
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
    for (Deployment d : List.copyOf(deployments.current())) {
      for (InstanceSlot s : List.copyOf(d.slots)) {
        if (d.slots.size() <= d.options.minInstances()) {
          break;
        }
        if (s.instance != null && !s.busy() && now - s.idleSince >= d.options.keepAlive().toNanos()) {
          placement.evict(s);
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
    for (Deployment d : deployments.named(name)) {
      n += (int) d.slots.stream().filter(s -> s.state().equals(state)).count();
    }
    return n;
  }

  /** Requests waiting for an instance of {@code name} (one being replaced included): a gauge. */
  private synchronized int queueDepth(String name) {
    return deployments.named(name).stream().mapToInt(d -> d.queue.size()).sum();
  }

  // ---- what GET shows ----

  /** A function's state for {@code GET /v1/functions/{name}}. */
  public synchronized ObjectNode status(String name) {
    Deployment d = deployments.get(name);
    if (d == null && awaiting.containsKey(name)) {
      return FunctionStatus.pulling(name, awaiting.get(name).state());
    }
    if (d == null) {
      throw ServeException.notFound(name);
    }
    return FunctionStatus.of(d, ready(name), factory.imageState(d.image.tag()));
  }

  public synchronized ObjectNode trace(String name) {
    Deployment d = deployments.get(name);
    if (d == null) {
      throw missing(name);
    }
    return FunctionStatus.trace(d);
  }

  /** Instances alive now, starting ones included, across all functions: for leak checks. */
  public synchronized int instanceCount() {
    return deployments.all().stream().mapToInt(d -> d.slots.size()).sum();
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
      for (Deployment d : deployments.all()) {
        failQueue(d, shuttingDown());
        for (InstanceSlot s : List.copyOf(d.slots)) {
          threads.add(s.thread);
          placement.evict(s);
          s.thread.shutdown();
        }
      }
      metrics.removeAll();
      deployments.clear();
      awaiting.clear();
    }
    reaper.shutdownNow();
    synchronized (this) {
      wakeAhead.close();
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
}
