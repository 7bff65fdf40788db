package dev.thaw.pool.worker;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.HelperLink;
import dev.thaw.image.restore.ImageRestoreException;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestore;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.pool.WorkerErrorKind;
import dev.thaw.pool.cache.HostCacheView;
import dev.thaw.pool.cache.PinnedChunks;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmExport;
import dev.thaw.pool.hbm.PeerSlabs;
import dev.thaw.pool.hbm.ResidentSlabs;
import dev.thaw.pool.hbm.TieredRestoreSource;
import dev.thaw.pool.protocol.Frame;
import dev.thaw.pool.protocol.FrameCodec;
import dev.thaw.pool.protocol.FrameType;
import dev.thaw.pool.protocol.ProtocolException;
import dev.thaw.pool.protocol.WorkerMessages;
import dev.thaw.pool.protocol.WorkerMessages.Become;
import dev.thaw.pool.protocol.WorkerMessages.BecomeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.BecomeGroup;
import dev.thaw.pool.protocol.WorkerMessages.ExportAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Failure;
import dev.thaw.pool.protocol.WorkerMessages.Forget;
import dev.thaw.pool.protocol.WorkerMessages.Hbm;
import dev.thaw.pool.protocol.WorkerMessages.Invoke;
import dev.thaw.pool.protocol.WorkerMessages.InvokeAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Near;
import dev.thaw.pool.protocol.WorkerMessages.Part;
import dev.thaw.pool.protocol.WorkerMessages.Prepare;
import dev.thaw.pool.protocol.WorkerMessages.Recycle;
import dev.thaw.pool.protocol.WorkerMessages.RecycleAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Resident;
import dev.thaw.pool.protocol.WorkerMessages.StatusAnswer;
import dev.thaw.pool.protocol.WorkerMessages.Trace;
import dev.thaw.pool.protocol.WorkerMessages.TraceAnswer;
import dev.thaw.pool.worker.PreparedImages.Prepared;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.CudaOutOfMemoryException;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * A worker's image life cycle, on the executing thread: prepare images while blank (or forget them), become one
 * (an on-demand restore: answered once the function is invocable, RESIDENT sent when the last byte landed), then
 * serve INVOKEs, EXPORT its read-only slabs for the HBM tier and give its restore's TRACE, then, once released,
 * drop the image and become blank again (RECYCLE) or exit. The INVOKEs of a function that serves several requests
 * at once ({@code concurrency} above 1) go to its engine and are answered from the engine's thread as each
 * completes; any other function's run one at a time here.
 *
 * <p>Invariants: a BECOME's answer is written before anything else is arranged for it (its RESIDENT report comes
 * after it, always, and never after the RECYCLE that dropped its restore); the image's read-only slabs are
 * write-protected only while no request runs (a mapping's access changed under a kernel faulted on the GPU), once the
 * worker has been idle {@code protectAfterIdleMillis}; an INVOKE's PART frames are all written before its RESULT
 * (the function sends them before it answers).
 */
final class WorkerImage implements WorkerLoop.Work {

  /** {@code DAMAGED}: a RECYCLE could not drop the image cleanly; the worker takes nothing more and is ended. */
  enum State { STARTING, BLANK, BECOMING, READY, INVOKING, RECYCLING, DAMAGED }

  /** How long a RECYCLE waits for the thread releasing the restore's peer slabs and links. */
  private static final long RELEASE_WAIT_MILLIS = 10_000;

  /** Copy spans in a TRACE answer when the request names no cap. */
  private static final int TRACE_SPANS = 512;

  /**
   * Read-only slabs created exportable, for the HBM tier; where the device refuses exportable memory for any reason
   * but lack of memory, fresh memory (said on stderr): the image restores, and merely cannot join the tier.
   */
  private static final FunctionSession.SlabSource EXPORTABLE_OR_FRESH = (context, slab) -> {
    try {
      return FunctionSession.SlabSource.EXPORTABLE_READ_ONLY.back(context, slab);
    } catch (CudaOutOfMemoryException e) {
      throw e;
    } catch (CudaException e) {
      System.err.println("thaw worker: exportable memory refused (" + e.getMessage() + "); slab at 0x"
          + Long.toHexString(slab.address()) + " is not exportable");
      return FunctionSession.SlabSource.FRESH.back(context, slab);
    }
  };

  private final WorkerConfig config;
  private final GpuDriver driver;
  private final GpuContext context;
  private final RestoreResources resources;
  private final HostCacheView cache;
  private final WorkerStores stores;
  private final PreparedImages prepared;
  /** Other devices' links, or null; made afresh when a recycled worker opens them again. */
  private volatile WorkerHelpers helpers;
  private final WorkerReplies out;
  private final WorkerLoop loop;
  private final ObjectMapper json = FrameCodec.json();
  private final long pid = ProcessHandle.current().pid();

  private volatile State state = State.STARTING;
  private volatile String image;
  private volatile long invocations;
  private volatile ScheduledThreadPoolExecutor nearTimer;
  /** The INVOKEs read and not yet answered, by frame id: their streams, for PART frames and CANCEL. */
  private final Map<Integer, ResponseStream> calls = new ConcurrentHashMap<>();
  /** INVOKEs handed to the function's engine and not yet answered; guarded by {@code this}. */
  private int inEngine;
  private OnDemandRestore restored;
  /** The group this worker became (BECOME_GROUP) instead of one image, or null; never recycled. */
  private volatile WorkerGroup group;
  /** The BECOME that made {@link #restored}: when it was read (time zero of its trace), and its answer. */
  private Became became;
  /** When the BECOME that made {@link #restored} began, for its RESIDENT report. */
  private long becomeStart;
  /** {@link #restored}'s read-only slabs are protected (or protection was tried). */
  private boolean slabsProtected;
  /** Another device's HBM-tier slabs {@link #restored} pulls from, until it is resident; or null. */
  private volatile PeerSlabs peerSlabs;
  /** The thread {@link #releaseAfterRestore} started, or null: a RECYCLE waits for it. */
  private volatile Thread releasing;
  /** {@code [start, end)} device ranges of {@link #restored}'s slabs imported from the HBM tier: the tier's memory. */
  private List<long[]> importedRanges = List.of();
  /** The slabs the last EXPORT handed to the parent, whose descriptors this process holds until a RECYCLE. */
  private List<ExportedSlab> exported = List.of();
  /** Bytes of device memory this process held when it was blank, before the BECOME: a RECYCLE must return to it. */
  private long blankHeldBytes;
  /** Images this worker became in its life. */
  private int images;

  private record Became(long takenNanos, BecomeAnswer answer) {}

  /** Where a BECOME reads from: the source, the chunks the host cache holds (or null), what to call it. */
  private record Tiers(RestoreSource source, PinnedChunks chunks, String from) {}

  WorkerImage(WorkerConfig config, GpuDriver driver, GpuContext context, RestoreResources resources,
      HostCacheView cache, WorkerStores stores, PreparedImages prepared, WorkerHelpers helpers, WorkerReplies out,
      WorkerLoop loop) {
    this.config = config;
    this.driver = driver;
    this.context = context;
    this.resources = resources;
    this.cache = cache;
    this.stores = stores;
    this.prepared = prepared;
    this.helpers = helpers;
    this.out = out;
    this.loop = loop;
  }

  /** Start-up is over: the worker is blank and may become an image. */
  void blank() {
    state = State.BLANK;
  }

  /** The keys of the images held prepared now. */
  List<String> preparedKeys() {
    return prepared.keys();
  }

  @Override
  public StatusAnswer status(int queued) {
    return new StatusAnswer(pid, state.name(), image, invocations, queued);
  }

  @Override
  public void arrived(Frame invoke) {
    int id = invoke.id();
    calls.put(id, Invoke.from(invoke.head(), invoke.body().length).stream()
        ? ResponseStream.streamed(part -> sendPart(id, part)) : ResponseStream.unstreamed());
  }

  @Override
  public void cancel(int id) {
    ResponseStream s = calls.get(id);
    if (s != null) {
      s.cancel();
    }
  }

  private void sendPart(int id, JsonNode part) {
    byte[] body;
    try {
      body = json.writeValueAsBytes(part);
    } catch (IOException e) {
      throw new IllegalArgumentException("a response part that is not JSON: " + e.getMessage(), e);
    }
    out.sendLater(Frame.of(id, new Part(), body));
  }

  @Override
  public void execute(Frame f) {
    long taken = System.nanoTime();
    if (f.type() == FrameType.BECOME || f.type() == FrameType.BECOME_GROUP) {
      becomeAndAnswer(f, taken);
      return;
    }
    Frame reply;
    try {
      reply = switch (f.type()) {
        case PREPARE -> prepare(f);
        case FORGET -> Frame.of(f.id(), prepared.forget(Forget.from(f.head())));
        case EXPORT -> export(f);
        case TRACE -> trace(f);
        case RECYCLE -> recycle(f);
        default -> invoke(f);
      };
    } catch (Throwable e) {
      if (f.type() == FrameType.INVOKE) {
        calls.remove(f.id());
      }
      failed(f, e, false);
      return;
    }
    if (reply == null) {
      // Handed to the function's engine, which answers it.
      return;
    }
    ResponseStream streamed = f.type() == FrameType.INVOKE ? calls.remove(f.id()) : null;
    if (streamed != null && streamed.streamed()) {
      // After its parts, which the writer thread sends.
      out.sendLater(reply);
    } else {
      out.send(reply);
    }
    if (f.type() == FrameType.INVOKE) {
      protectWhenIdle();
    }
  }

  /**
   * Arranges for the read-only slabs to be protected after a request: not after a BECOME (the first request is on its
   * way), and not at once either (a request right behind this one must not wait): once the worker has been idle a
   * while.
   */
  private void protectWhenIdle() {
    if (!slabsProtected && restored != null) {
      if (config.protectAfterIdleMillis() == 0) {
        idle();
      } else {
        loop.idleIn(config.protectAfterIdleMillis());
      }
    }
  }

  /**
   * A BECOME or BECOME_GROUP: its answer first, then its RESIDENT report is arranged and the other prepared images go.
   */
  private void becomeAndAnswer(Frame f, long taken) {
    WorkerMessages.Reply reply;
    try {
      reply = f.type() == FrameType.BECOME_GROUP ? becomeGroup(f) : become(f);
    } catch (Throwable e) {
      failed(f, e, true);
      return;
    }
    if (!(reply instanceof BecomeAnswer answer)) {
      out.send(f.id(), reply);
      return;
    }
    BecomeAnswer sent = answer.sentAt(System.nanoTime());
    out.send(f.id(), sent);
    long read = loop.becomeRead();
    became = new Became(read != 0 ? read : taken, sent);
    reportResident(f.id());
    // This worker is that image until it is recycled, which prepares afresh: the others' modules go (after the answer,
    // off the cold path).
    prepared.closeAll();
  }

  private void failed(Frame f, Throwable e, boolean restoring) {
    WorkerErrorKind kind = WorkerFailures.kindOf(e, restoring);
    if (kind == WorkerErrorKind.CUDA_STICKY || kind == WorkerErrorKind.INTERNAL) {
      e.printStackTrace();
    }
    // The state first: whatever the parent sends once it read the failure (a STATUS, the next BECOME) sees it.
    if (f.type() == FrameType.RECYCLE) {
      state = State.DAMAGED;
    } else if (restoring && state == State.BECOMING) {
      state = State.BLANK;
      image = null;
    } else if (state == State.INVOKING && !restoring && f.type() == FrameType.INVOKE) {
      synchronized (this) {
        if (inEngine == 0) {
          state = State.READY;
        }
      }
    }
    out.send(f.id(), WorkerFailures.of(kind, e));
    if (kind == WorkerErrorKind.CUDA_STICKY) {
      Runtime.getRuntime().halt(WorkerMain.EXIT_STICKY);
    }
  }

  private Frame prepare(Frame f) throws Exception {
    if (state != State.BLANK && state != State.STARTING) {
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "this worker is '" + image + "' (" + state
          + "); it prepares no other image"));
    }
    return Frame.of(f.id(), prepared.prepare(Prepare.from(f.head(), f.body().length), f.body()));
  }

  // ---- BECOME ----

  /**
   * Restores the image on demand and answers once its function is invocable. Its phases are disjoint and add up to
   * {@code total}: {@code queued} (read off stdin to taken up), {@code prepared} or {@code manifest}, {@code
   * placement} (host cache), {@code hbm take} (HBM tier), {@code peer take} (another device's tier), {@code store},
   * {@code load modules}, {@code map allocations}, {@code rebuild state}, {@code start restore} (the rest of the
   * restore call) and, when the parent asked to await residency, {@code resident}. The host cache's bytes go through
   * this device's link and the helper links the source names that this worker holds open; another device's tier's
   * weights through the link from that device, when it holds one.
   */
  private WorkerMessages.Reply become(Frame f) throws Exception {
    if (state != State.BLANK) {
      return new Failure(WorkerErrorKind.STATE, state == State.DAMAGED ? "this worker could not drop '" + image
          + "' and takes no other image" : "this worker is '" + image + "'; it becomes another only once blank "
          + "again (RECYCLE)");
    }
    Become b = Become.from(f.head());
    long start = System.nanoTime();
    long read = loop.becomeRead();
    double queued = read == 0 ? 0 : Math.max(0, (start - read) / 1e6);
    Prepared ready = null;
    if (b.prepared() != null) {
      ready = prepared.take(b.prepared());
      if (ready == null) {
        // Still blank: the parent sends the image whole.
        return new Failure(WorkerErrorKind.NOT_PREPARED, "BECOME names prepared image '" + b.prepared()
            + "', which this worker does not hold");
      }
    }
    image = b.name();
    state = State.BECOMING;
    blankHeldBytes = context.heldMemoryBytes();
    byte[] body = f.body();
    int manifestBytes = ready != null ? 0 : manifestBytes(b, body);
    byte[] manifestBody = ready != null ? ready.manifest()
        : manifestBytes == body.length ? body : Arrays.copyOf(body, manifestBytes);
    ImageManifest manifest = ready != null ? ready.restore().plan().manifest() : ImageManifest.read(manifestBody);
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("queued", queued);
    long t = WorkerMain.phase(phases, ready != null ? "prepared" : "manifest", start);
    Tiers tiers = tiers(b, ready, Arrays.copyOfRange(body, manifestBytes, body.length));
    if (tiers.chunks() != null) {
      t = WorkerMain.phase(phases, "placement", t);
    }
    OnDemandOptions onDemand = new OnDemandOptions();
    ResidentSlabs resident = null;
    if (b.source().hbm() != null) {
      requireCache(tiers, "HBM-tier slabs");
      resident = takeHbm(b.source().hbm());
      onDemand.setSlabSource(resident != null ? resident : EXPORTABLE_OR_FRESH);
      tiers = new Tiers(new TieredRestoreSource(tiers.chunks(), resident), tiers.chunks(), tiers.from());
      t = WorkerMain.phase(phases, "hbm take", t);
    }
    PeerSlabs peer = null;
    if (b.source().peer() != null) {
      requireCache(tiers, "another device's HBM-tier slabs");
      peer = takePeer(b.source().peer());
      if (peer != null) {
        tiers = new Tiers(peer.over(tiers.source()), tiers.chunks(), tiers.from());
      }
      t = WorkerMain.phase(phases, "peer take", t);
    }
    HelperLink relay = peer == null ? null : peer.link();
    List<HelperLink> links = new ArrayList<>();
    if (helpers != null && !b.source().helpers().isEmpty()) {
      // A loop, not a stream: a lambda's first call in this JVM would be on the cold path.
      for (HelperLink l : helpers.lend(b.source().helpers())) {
        if (l != relay) {
          links.add(l);
        }
      }
    }
    if (!links.isEmpty()) {
      onDemand.setHelpers(links).setHelperShare(b.source().helperShare());
    }
    if (!b.source().helpers().isEmpty()) {
      t = WorkerMain.phase(phases, "lend", t);
    }
    // A prepared image was checked against the store then; that store is still the one open unless another PREPARE
    // reopened it since.
    RocksChunkStore store = ready != null && ready.store() == stores.current() ? ready.store()
        : stores.storeFor(b.source(), b.name(), manifestBody);
    t = WorkerMain.phase(phases, "store", t);
    OnDemandRestore restore;
    try {
      restore = ready != null ? new OnDemandRestorer(store).restore(ready.restore(), tiers.source(), resources,
          onDemand) : new OnDemandRestorer(store).restore(manifest, context, tiers.source(), resources, onDemand);
    } catch (Throwable e) {
      if (peer != null) {
        peer.close();
      }
      throw e;
    } finally {
      if (resident != null) {
        resident.close();
      }
    }
    boolean fromHbm = resident != null && !resident.residentBuffers().isEmpty();
    restorePhases(phases, restore, t);
    if (b.awaitResident()) {
      try {
        awaitResident(restore, phases);
      } catch (RuntimeException e) {
        if (peer != null) {
          peer.close();
        }
        throw e;
      }
    }
    peerSlabs = peer;
    restored = restore;
    importedRanges = resident != null ? resident.residentRanges() : List.of();
    images++;
    becomeStart = start;
    state = State.READY;
    long totalEnd = System.nanoTime();
    phases.put("total", queued + (totalEnd - start) / 1e6);
    String from = fromHbm ? "hbm" : peer != null ? "hbm-peer" : tiers.from();
    List<Integer> lent = new ArrayList<>();
    for (HelperLink l : links) {
      lent.add(l.helper().device().ordinal());
    }
    if (relay != null) {
      lent.add(relay.helper().device().ordinal());
    }
    return new BecomeAnswer(phases, manifest.totalBytes(), from, lent, restore.isResident(), fromHbm
        ? resident.importMillis() : peer != null ? peer.mapMillis() : -1, totalEnd, 0);
  }

  /**
   * Restores a group image's ranks at once ({@link WorkerGroup}) and answers once the group serves, as BECOME does; its
   * phases are the group's and add up to {@code total}.
   */
  private WorkerMessages.Reply becomeGroup(Frame f) {
    if (state != State.BLANK) {
      return new Failure(WorkerErrorKind.STATE, "this worker is '" + image + "' (" + state + "); only a blank worker "
          + "becomes a group");
    }
    BecomeGroup b = BecomeGroup.from(f.head());
    long start = System.nanoTime();
    long read = loop.becomeRead();
    double queued = read == 0 ? 0 : Math.max(0, (start - read) / 1e6);
    Prepared ready = null;
    if (b.prepared() != null) {
      ready = prepared.take(b.prepared());
      if (ready == null) {
        // Still blank: the parent sends the group unprepared.
        return new Failure(WorkerErrorKind.NOT_PREPARED, "BECOME_GROUP names prepared group '" + b.prepared()
            + "', which this worker does not hold");
      }
    }
    image = b.name();
    state = State.BECOMING;
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("queued", queued);
    WorkerGroup g = WorkerGroup.become(b, f.body(), ready, new WorkerGroup.Worker(driver, context, resources, cache,
        stores, helpers), phases);
    group = g;
    images++;
    becomeStart = start;
    state = State.READY;
    long totalEnd = System.nanoTime();
    phases.put("total", queued + (totalEnd - start) / 1e6);
    return new BecomeAnswer(phases, g.totalBytes(), g.from(), List.of(), g.isResident(), -1, totalEnd, 0);
  }

  private static void requireCache(Tiers tiers, String what) {
    if (tiers.chunks() == null) {
      throw new ImageRestoreException("BECOME names " + what + " without the host cache", null);
    }
  }

  private static int manifestBytes(Become b, byte[] body) {
    int n = b.manifestBytes() < 0 ? body.length : b.manifestBytes();
    if (n > body.length) {
      throw new ImageRestoreException("BECOME says its manifest has " + n + " of the body's " + body.length
          + " bytes", null);
    }
    return n;
  }

  /** The host cache's chunks for a {@code cache} source (the placement prepared, or the one sent), else the store. */
  private Tiers tiers(Become b, Prepared ready, byte[] placement) {
    if (!b.source().kind().equals("cache")) {
      return new Tiers(RestoreSource.STORE_ONLY, null, "store");
    }
    PinnedChunks chunks;
    if (b.placementPrepared()) {
      if (ready == null || ready.chunks() == null) {
        throw new ImageRestoreException("BECOME says the host cache placement '" + b.name() + "' was prepared "
            + "with holds, and this worker prepared it with none", null);
      }
      chunks = ready.chunks();
    } else {
      // The placement it was prepared with holds unless the cache moved the image since (staged it again).
      chunks = ready != null && ready.chunks() != null && Arrays.equals(placement, ready.placement())
          ? ready.chunks() : HostPlacements.chunks(cache, placement);
    }
    return new Tiers(HostPlacements.hostTier(chunks), chunks, "cache");
  }

  /** The HBM tier's slabs, taken from the parent; null when there are none or the tier dropped them meanwhile. */
  private static ResidentSlabs takeHbm(Hbm hbm) {
    if (hbm.slabs().isBlank()) {
      return null;
    }
    try {
      return ResidentSlabs.take(hbm.pid(), ExportedSlab.decodeAll(hbm.slabs()));
    } catch (IOException | IllegalArgumentException e) {
      System.err.println("thaw worker: HBM-tier slabs not taken, restoring from the host cache: " + e);
      return null;
    }
  }

  /**
   * Another device's HBM-tier slabs, taken from the parent and mapped here: on that device, to be relayed through this
   * worker's link from it, when it holds one (a local mapping there, where granting this device access to that memory
   * would cost milliseconds per GB), else for this device. Null when the tier dropped them meanwhile or this device
   * cannot reach that one's memory (the image then comes from the host cache).
   */
  private PeerSlabs takePeer(Hbm peer) {
    if (peer.slabs().isBlank()) {
      return null;
    }
    HelperLink relay = helpers == null || peer.device() < 0 ? null : helpers.relay(peer.device());
    try {
      List<ExportedSlab> slabs = ExportedSlab.decodeAll(peer.slabs());
      return relay != null ? PeerSlabs.take(relay, peer.pid(), slabs) : PeerSlabs.take(context, peer.pid(), slabs);
    } catch (IOException | IllegalArgumentException | CudaException e) {
      if (e instanceof CudaOutOfMemoryException oom) {
        throw oom;
      }
      System.err.println("thaw worker: another device's HBM-tier slabs not taken, restoring from the host cache: "
          + e);
      return null;
    }
  }

  /**
   * The restore call's phases, disjoint: what it spent besides modules, map and state (loading the function class,
   * planning, starting the stream) is {@code start restore}.
   */
  private static void restorePhases(Map<String, Double> phases, OnDemandRestore restore, long since) {
    OnDemandRestore.Timings rt = restore.timings();
    double call = (System.nanoTime() - since) / 1e6;
    phases.put("load modules", rt.modulesMillis());
    phases.put("map allocations", rt.mapMillis());
    phases.put("rebuild state", rt.stateMillis());
    phases.put("start restore", Math.max(0, call - rt.modulesMillis() - rt.mapMillis() - rt.stateMillis()));
  }

  private static void awaitResident(OnDemandRestore restore, Map<String, Double> phases) {
    long t = System.nanoTime();
    try {
      restore.awaitResident();
    } catch (RuntimeException e) {
      restore.close();
      throw e;
    }
    phases.put("resident", (System.nanoTime() - t) / 1e6);
  }

  /**
   * Sends RESIDENT once the BECOME's restore completes (at once if it has), or, if the restore fails after the
   * function became invocable, ERROR with id 0 and exits: the instance cannot serve.
   */
  private void reportResident(int becomeId) {
    WorkerGroup g = group;
    if (g != null) {
      long since = becomeStart;
      g.resident().whenComplete((ok, failure) -> {
        synchronized (this) {
          if (failure != null) {
            Throwable c = WorkerFailures.unwrap(failure);
            c.printStackTrace();
            out.fail(WorkerFailures.kindOf(c, true), c, WorkerMain.EXIT_RESTORE_FAILED);
            return;
          }
          releaseAfterRestore();
          out.send(becomeId, g.residentReport(since));
        }
      });
      return;
    }
    OnDemandRestore restore = restored;
    long start = becomeStart;
    restore.resident().whenComplete((ok, failure) -> {
      synchronized (this) {
        // A restore a RECYCLE dropped says nothing more: its stop is no failure, and its parent forgot it.
        if (restored != restore) {
          return;
        }
        residentReported(restore, becomeId, start, failure);
      }
    });
  }

  private void residentReported(OnDemandRestore restore, int becomeId, long start, Throwable failure) {
    if (failure != null) {
      Throwable c = WorkerFailures.unwrap(failure);
      c.printStackTrace();
      out.fail(WorkerFailures.kindOf(c, true), c, WorkerMain.EXIT_RESTORE_FAILED);
      return;
    }
    // The copies no longer read another device's slabs or lend links: the memory they hold goes back. (A failed
    // restore ends the worker instead, with copies maybe still in flight.)
    releaseAfterRestore();
    OnDemandRestore.Stats s = restore.stats();
    out.send(becomeId, new Resident((restore.residentNanos() - start) / 1e6, s.bytes(), s.hostBytes(),
        s.storeBytes(), s.residentBytes(), s.copies(), s.promotions(), s.waits(), s.peerBytes(), s.helperBytes()));
  }

  /**
   * Unmaps the other device's slabs and closes the helper links and their contexts, on a thread of its own (closing a
   * context is not free): the links serve a worker's first restore only (an instance holds nothing on other devices;
   * a recycled worker restores through its own link).
   */
  private void releaseAfterRestore() {
    PeerSlabs peer = peerSlabs;
    peerSlabs = null;
    WorkerHelpers links = helpers;
    if (peer == null && links == null) {
      return;
    }
    Thread t = WorkerMain.daemon(() -> {
      try {
        if (peer != null) {
          peer.close();
        }
      } finally {
        if (links != null) {
          links.close();
        }
      }
    }, "thaw-worker-release");
    releasing = t;
    t.start();
  }

  // ---- INVOKE ----

  /**
   * Runs the request here, or hands it to the function's engine (then returns null: the engine's thread answers it).
   */
  private Frame invoke(Frame f) throws Exception {
    if (state != State.READY && !(state == State.INVOKING && engineOn())) {
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "INVOKE before this worker became an image"));
    }
    long start = System.nanoTime();
    Invoke request = Invoke.from(f.head(), f.body().length);
    ResponseStream stream = calls.computeIfAbsent(f.id(), id -> request.stream()
        ? ResponseStream.streamed(part -> sendPart(id, part)) : ResponseStream.unstreamed());
    FunctionRequest fr = request(f, request);
    double decodeMs = (System.nanoTime() - start) / 1e6;
    if (engineOn()) {
      return submit(f, fr, stream, decodeMs);
    }
    state = State.INVOKING;
    // The parent's reader sleeps in a read while this runs; NEAR wakes it a little before the RESULT is due.
    ScheduledFuture<?> near = request.nearMicros() <= 0 ? null : nearTimer().schedule(
        () -> out.send(f.id(), new Near()), request.nearMicros() * 1000, TimeUnit.NANOSECONDS);
    try {
      long t = System.nanoTime();
      WorkerGroup g = group;
      FunctionResponse r = g != null ? g.invoke(fr, stream) : restored.function().invoke(fr, stream);
      Frame answer = answer(f.id(), r, decodeMs, t);
      invocations++;
      state = State.READY;
      return answer;
    } finally {
      if (near != null) {
        near.cancel(false);
      }
    }
  }

  /** True when the function serves several requests at once, through its engine. */
  private boolean engineOn() {
    return restored != null && restored.function().concurrency() > 1;
  }

  private FunctionRequest request(Frame f, Invoke request) throws IOException {
    int jsonBytes = request.jsonBytes();
    if (jsonBytes < 0 || jsonBytes > f.body().length) {
      throw new ProtocolException("jsonBytes " + jsonBytes + " outside the body's " + f.body().length);
    }
    JsonNode body = json.readTree(f.body(), 0, jsonBytes);
    if (body == null || !body.isObject()) {
      throw new InvalidRequestException("the request is not a JSON object");
    }
    Optional<ByteBuffer> binary = jsonBytes == f.body().length ? Optional.empty()
        : Optional.of(ByteBuffer.wrap(f.body(), jsonBytes, f.body().length - jsonBytes).slice());
    return new FunctionRequest(body, binary);
  }

  /** The RESULT for a response the function made from {@code functionStart} until now. */
  private Frame answer(int id, FunctionResponse r, double decodeMs, long functionStart) throws IOException {
    long t2 = System.nanoTime();
    byte[] responseJson = json.writeValueAsBytes(r.json());
    byte[] bytes = withBinary(responseJson, r.binary());
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("decode", decodeMs);
    phases.put("invoke", (t2 - functionStart) / 1e6);
    phases.put("encode", (System.nanoTime() - t2) / 1e6);
    return Frame.of(id, new InvokeAnswer(responseJson.length, phases), bytes);
  }

  /**
   * Hands the request to the function's engine; its thread sends the answer. The worker is INVOKING while any request
   * is in the engine, so nothing protects slabs or exports under a step.
   */
  private Frame submit(Frame f, FunctionRequest request, ResponseStream stream, double decodeMs) {
    FunctionEngine engine = restored.function().engine();
    synchronized (this) {
      inEngine++;
      state = State.INVOKING;
    }
    long t = System.nanoTime();
    CompletableFuture<FunctionResponse> served;
    try {
      served = engine.submit(request, stream);
    } catch (RuntimeException | Error e) {
      leftEngine(false);
      throw e;
    }
    served.whenComplete((r, e) -> {
      calls.remove(f.id());
      if (e != null) {
        leftEngine(false);
        failed(f, WorkerFailures.unwrap(e), false);
        return;
      }
      Frame reply;
      try {
        reply = answer(f.id(), r, decodeMs, t);
      } catch (IOException | RuntimeException x) {
        leftEngine(false);
        failed(f, x, false);
        return;
      }
      leftEngine(true);
      if (stream.streamed()) {
        // After its parts, which the writer thread sends.
        out.sendLater(reply);
      } else {
        out.send(reply);
      }
    });
    return null;
  }

  /** A request left the engine; the last one out makes the worker READY and arranges the slabs' protection. */
  private void leftEngine(boolean served) {
    boolean idle;
    synchronized (this) {
      inEngine--;
      if (served) {
        invocations++;
      }
      idle = inEngine == 0;
      if (idle) {
        state = State.READY;
      }
    }
    if (idle && !slabsProtected) {
      // Off this (the engine's) thread: the loop's thread protects them holding the executing turn, so that no
      // request is handed to the engine meanwhile.
      loop.idleIn(config.protectAfterIdleMillis());
    }
  }

  private static byte[] withBinary(byte[] json, Optional<ByteBuffer> binary) {
    if (binary.isEmpty()) {
      return json;
    }
    ByteBuffer b = binary.get().duplicate();
    byte[] out = Arrays.copyOf(json, json.length + b.remaining());
    b.get(out, json.length, b.remaining());
    return out;
  }

  /** The thread that sends NEAR frames; made at the first INVOKE that asks for one. */
  private ScheduledThreadPoolExecutor nearTimer() {
    ScheduledThreadPoolExecutor t = nearTimer;
    if (t == null) {
      synchronized (this) {
        if (nearTimer == null) {
          nearTimer = new ScheduledThreadPoolExecutor(1, r -> WorkerMain.daemon(r, "thaw-worker-near"));
          nearTimer.setRemoveOnCancelPolicy(true);
        }
        t = nearTimer;
      }
    }
    return t;
  }

  // ---- idle: write protection ----

  /**
   * Write-protects the image's read-only slabs once its restore is resident, here where no request runs (called by
   * the thread that holds the executing turn, so a request read meanwhile waits for it); a restore still copying is
   * tried again after the next idle stretch.
   */
  @Override
  public void idle() {
    try {
      protectSlabs("while idle after " + invocations + " request(s)");
      if (!slabsProtected && restored != null && !restored.isResident()) {
        // Copies still due: again after the next idle stretch (at least 5 ms: not a spin while they land).
        loop.idleIn(Math.max(config.protectAfterIdleMillis(), 5));
      }
    } catch (RuntimeException e) {
      // A refusal leaves the slab writable and is reported by the restore; what gets here is the context's error.
      e.printStackTrace();
      WorkerErrorKind kind = WorkerFailures.kindOf(e, false);
      if (kind == WorkerErrorKind.CUDA_STICKY) {
        out.fail(kind, e, WorkerMain.EXIT_STICKY);
      }
    }
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
      System.err.printf(Locale.ROOT, "thaw worker: read-only slabs protected %s: %d of %d slab(s), %.1f MiB, "
          + "cuMemSetAccess %.3f ms, %.3f ms in all%s%n", when, p.slabs(), p.of(), p.bytes() / 1048576.0,
          p.millis(), (System.nanoTime() - t) / 1e6, p.refused() == null ? "" : "; refused: " + p.refused());
    }
  }

  // ---- RECYCLE ----

  /**
   * Drops the image and makes the worker blank again, keeping the context, the address arena, the restore's resources
   * and the host cache: the copies and the function's engine stop, every slab but the HBM tier's is zeroed
   * ({@link DeviceScrub}), the session's memory is unmapped and released and its modules unloaded, the restore's
   * resources go back, and its state, its host state with it, is forgotten. Then this process must hold no more device
   * memory than before the BECOME: memory a function allocated outside its session would outlive the image, so the
   * worker says so and is ended instead. Any failure leaves the worker {@link State#DAMAGED}: never blank.
   */
  private Frame recycle(Frame f) throws Exception {
    boolean idle;
    synchronized (this) {
      idle = state == State.READY && inEngine == 0 && restored != null;
      if (idle) {
        state = State.RECYCLING;
      }
    }
    if (!idle) {
      state = state == State.BLANK || state == State.STARTING ? state : State.DAMAGED;
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "only an idle worker that became an image drops it "
          + "(state " + state + ")"));
    }
    boolean exportKept = Recycle.from(f.head()).exportKept();
    List<long[]> tier = new ArrayList<>(importedRanges);
    if (exportKept) {
      for (ExportedSlab e : exported) {
        tier.add(new long[] {e.address(), e.address() + e.size()});
      }
    }
    // The parent has taken its copies of the descriptors (or let them go): this process's go now, so that the memory
    // lives on only where the tier holds it.
    HbmExport.close(exported);
    exported = List.of();
    Map<String, Double> phases = new LinkedHashMap<>();
    long start = System.nanoTime();
    OnDemandRestore restore;
    synchronized (this) {
      restore = restored;
      restored = null;
    }
    releaseRestoreHolds();
    long[] marks = new long[2];
    DeviceScrub.Result[] scrubbed = new DeviceScrub.Result[1];
    restore.close(session -> {
      marks[0] = System.nanoTime();
      scrubbed[0] = DeviceScrub.scrub(session, tier);
      marks[1] = System.nanoTime();
    });
    long freed = System.nanoTime();
    phases.put("stop", (marks[0] - start) / 1e6);
    phases.put("scrub", (marks[1] - marks[0]) / 1e6);
    phases.put("free", (freed - marks[1]) / 1e6);
    long held = context.heldMemoryBytes();
    WorkerMain.phase(phases, "check", freed);
    if (held > blankHeldBytes) {
      state = State.DAMAGED;
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "'" + image + "' left " + (held - blankHeldBytes)
          + " bytes of device memory allocated outside its session; the worker is not reused"));
    }
    String was = image;
    image = null;
    became = null;
    becomeStart = 0;
    slabsProtected = false;
    importedRanges = List.of();
    invocations = 0;
    // The image's host state is garbage now: collected here, before the worker is handed out again, so that the next
    // cold start does not run into a collection it did not cause.
    long gc = System.nanoTime();
    System.gc();
    long t = WorkerMain.phase(phases, "gc", gc);
    WorkerHelpers links = helpers;
    if (links != null && links.isClosed()) {
      // Its first restore closed them: opened again here, off any cold path, so that the next image restores through
      // them as a fresh worker's would.
      helpers = links.fresh();
      helpers.openAll();
      WorkerMain.phase(phases, "helperLinks", t);
    }
    state = State.BLANK;
    System.err.printf(Locale.ROOT, "worker %d: dropped '%s' (%d image(s) so far): %.1f MiB scrubbed, %.1f MiB the "
        + "HBM tier's%n", pid, was, images, scrubbed[0].scrubbedBytes() / 1048576.0,
        scrubbed[0].keptBytes() / 1048576.0);
    return Frame.of(f.id(), new RecycleAnswer(phases, scrubbed[0].scrubbedBytes(), scrubbed[0].keptBytes(),
        prepared.keys(), helpers == null ? List.of() : helpers.devices(), images));
  }

  /**
   * What the restore holds besides its session, given back before it closes: another device's slabs (mapped while
   * the restore still copied) and the thread releasing them and the links once it was resident.
   */
  private void releaseRestoreHolds() throws InterruptedException {
    PeerSlabs peer = peerSlabs;
    peerSlabs = null;
    if (peer != null) {
      peer.close();
    }
    Thread t = releasing;
    releasing = null;
    if (t != null) {
      t.join(RELEASE_WAIT_MILLIS);
      if (t.isAlive()) {
        throw new IllegalStateException("the restore's peer slabs and links were not released in "
            + RELEASE_WAIT_MILLIS + " ms");
      }
    }
  }

  // ---- EXPORT, TRACE ----

  /**
   * Hands the image's read-only slabs to the parent's HBM tier: descriptors it takes before this worker exits or drops
   * the image.
   */
  private Frame export(Frame f) {
    if (state != State.READY || restored == null || !restored.isResident()) {
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "only a worker whose image is wholly on the device "
          + "exports it (state " + state + ")"));
    }
    protectSlabs("at EXPORT");
    List<Long> written = restored.mayHaveBeenWritten();
    if (!written.isEmpty()) {
      System.err.println("thaw worker: read-only slabs " + written + " may have been written before they were "
          + "protected; not handed to the HBM tier");
    }
    List<ExportedSlab> slabs = HbmExport.exportReadOnly(restored.function().session(), written);
    HbmExport.close(exported);
    exported = slabs;
    return Frame.of(f.id(), new ExportAnswer(pid, ExportedSlab.encodeAll(slabs)));
  }

  /**
   * The restore's timeline, time zero when the BECOME was read off stdin: a row of the BECOME's phases laid end to
   * end as its answer reported them, with the moment the last byte landed, then the restore's own rows (host phases,
   * copies on the restore stream, the first launch), copy spans capped.
   */
  private Frame trace(Frame f) throws IOException {
    if (state != State.READY || restored == null || became == null || !restored.isResident()) {
      return Frame.of(f.id(), new Failure(WorkerErrorKind.STATE, "only a worker whose image is wholly on the device "
          + "has a timeline to give (state " + state + ")"));
    }
    Trace request = Trace.from(f.head(), TRACE_SPANS);
    long zero = became.takenNanos();
    ObjectNode trace = restored.trace().chromeTrace(zero, request.maxSpans());
    ArrayNode events = (ArrayNode) trace.get("traceEvents");
    BecomeAnswer a = became.answer();
    ObjectNode row = events.insertObject(0);
    row.put("name", "thread_name").put("ph", "M").put("pid", 1).put("tid", 0);
    row.putObject("args").put("name", "worker " + pid + " on device " + config.ordinal() + ": BECOME");
    ObjectNode all = span(events, "BECOME " + image, 0, a.phases().getOrDefault("total", 0.0) * 1e3);
    all.putObject("args").put("image", image).put("source", a.source()).put("bytes", a.bytes()).put("pid", pid)
        .put("device", config.ordinal());
    double t = 0;
    for (Map.Entry<String, Double> p : a.phases().entrySet()) {
      if (!p.getKey().equals("total")) {
        double dur = p.getValue() * 1e3;
        span(events, p.getKey(), t, dur);
        t += dur;
      }
    }
    ObjectNode landed = events.addObject();
    landed.put("name", "resident: every byte on the device").put("ph", "i").put("s", "t").put("pid", 1)
        .put("tid", 0).put("ts", (restored.residentNanos() - zero) / 1e3);
    return Frame.of(f.id(), new TraceAnswer(zero, System.nanoTime()), json.writeValueAsBytes(trace));
  }

  private static ObjectNode span(ArrayNode events, String name, double tsMicros, double durMicros) {
    ObjectNode e = events.addObject();
    e.put("name", name).put("ph", "X").put("pid", 1).put("tid", 0).put("ts", tsMicros).put("dur", durMicros);
    return e;
  }
}
