package dev.thaw.image.restore;

import dev.thaw.image.staging.Staging;
import dev.thaw.image.staging.StagingRing;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.host.Threads;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What on-demand restores on one context need and should not make per restore: the restore stream (and a second
 * one for {@link OnDemandOptions.Promotion#SECOND_STREAM}, and a third for copies from another GPU's memory), a pool of
 * timing events, pinned staging for chunks read from the store, a pinned arena for uploads that must wait for
 * residency, the restore thread and the store readers. Made once by the long-lived owner (a pooled worker, a
 * benchmark), off the cold path, and lent to one restore at a time.
 */
public final class RestoreResources implements AutoCloseable {

  public static final long DEFAULT_UPLOAD_ARENA_BYTES = 1L << 20;
  /**
   * The staging restores read the store through: 8 slots of 16 MiB, 128 MiB pinned, less than the build's 6 of 64 MiB
   * (pinning is paid per page, beside a pool worker's first BECOME, which the driver serialises with it). Read
   * ahead fills every slot, so eight keep the store's readers busy while copies drain. A slot must hold an image's
   * largest chunk: at most 1 MiB with the content-defined chunker's defaults, 4 MiB with the fixed-size one.
   */
  public static final int DEFAULT_STAGING_BUFFERS = 8;
  public static final long DEFAULT_STAGING_BYTES = 16L << 20;
  /** Events made up front: a restore takes one per run of copies (at most one per allocation; GPT-2-large has 518). */
  public static final int DEFAULT_EVENTS = 1024;
  /** Events made before {@link #create} returns; the rest are made behind it. */
  static final int EVENTS_AHEAD = 64;

  private final GpuContext context;
  private final GpuStream stream;
  private final GpuStream secondStream;
  private final GpuStream peerStream;
  private final ArrayDeque<GpuEvent> events = new ArrayDeque<>();
  private final List<GpuEvent> allEvents = new ArrayList<>();
  private final StagingRing staging;
  private final PinnedBuffer uploadArena;
  private final ExecutorService pump;
  private final ExecutorService readers;
  /** What making each part took, in milliseconds, in order: where a worker's {@code restoreResources} phase went. */
  private final Map<String, Double> creationMillis = new LinkedHashMap<>();
  /** Completes once the events made behind the constructor are made (or it stopped). */
  private final CompletableFuture<Void> eventsMade = new CompletableFuture<>();
  private final AtomicBoolean lent = new AtomicBoolean();
  private final AtomicBoolean closed = new AtomicBoolean();
  /** Completed at {@link #close}: the events still waiting to be made behind are not made. */
  private final CompletableFuture<Void> closing = new CompletableFuture<>();

  private RestoreResources(GpuContext context, int stagingBuffers, long stagingBytes, int readThreads,
      long uploadArenaBytes, int events, CompletionStage<?> behindAfter) {
    this.context = context;
    List<AutoCloseable> made = new ArrayList<>();
    try {
      long t = System.nanoTime();
      this.stream = context.createStream();
      made.add(stream);
      this.secondStream = context.createStream();
      made.add(secondStream);
      this.peerStream = context.createStream();
      made.add(peerStream);
      t = part("streams", t);
      this.uploadArena = context.allocatePinned(uploadArenaBytes);
      made.add(uploadArena);
      t = part("upload arena", t);
      // A few events now, the others behind on a thread of their own; a restore that finds none left makes its own.
      // Before the staging: the driver serialises whatever is made after the staging's first buffer with the pinning
      // of the others on their thread, so everything small is made while nothing else is pinned.
      for (int i = 0; i < Math.min(events, EVENTS_AHEAD); i++) {
        GpuEvent e = context.createEvent(true);
        made.add(e);
        allEvents.add(e);
        this.events.add(e);
      }
      t = part("events", t);
      // One staging buffer now, the others on a thread of their own: the owner (a pool worker) says READY without
      // waiting for every page of its staging to be pinned; a first restore that outruns them waits slot by slot.
      this.staging = StagingRing.allocate(context, stagingBuffers, stagingBytes, 1, behindAfter);
      made.add(staging);
      part("staging", t);
    } catch (RuntimeException e) {
      for (int i = made.size() - 1; i >= 0; i--) {
        try {
          made.get(i).close();
        } catch (Exception suppressed) {
          e.addSuppressed(suppressed);
        }
      }
      throw e;
    }
    this.pump = Executors.newSingleThreadExecutor(Threads.daemonFactory("thaw-restore"));
    this.readers = Executors.newFixedThreadPool(readThreads, Threads.daemonFactory("thaw-restore-read"));
    if (events > EVENTS_AHEAD) {
      Thread behind = Threads.startDaemon(() -> {
        try {
          CompletableFuture.anyOf(behindAfter.toCompletableFuture(), closing).join();
        } catch (RuntimeException e) {
          // Whatever it ended with, the events are made now (none once closed: makeEvents checks).
        }
        makeEvents(events - EVENTS_AHEAD);
      }, "thaw-restore-events");
    } else {
      eventsMade.complete(null);
    }
  }

  /** Adds {@code count} events to the pool, one at a time, until done or closed. */
  private void makeEvents(int count) {
    try {
      for (int i = 0; i < count && !closed.get(); i++) {
        GpuEvent e = context.createEvent(true);
        synchronized (this) {
          allEvents.add(e);
          events.add(e);
        }
      }
    } catch (RuntimeException e) {
      // A restore that finds the pool empty makes its own events (and fails with the reason if it cannot).
    } finally {
      eventsMade.complete(null);
    }
  }

  /** Defaults: {@link #DEFAULT_STAGING_BUFFERS} of {@link #DEFAULT_STAGING_BYTES}, {@link Staging}'s read threads, a
   * 1 MiB upload arena, 1024 events. */
  public static RestoreResources create(GpuContext context) {
    return create(context, CompletableFuture.completedFuture(null));
  }

  /**
   * Defaults, with what is made behind (the staging's other buffers, the other events) started only once
   * {@code behindAfter} completed: a pool worker keeps the pinning out of the way of the image it prepares at start
   * (loading its modules needs the driver, which serialises them with the pinning).
   */
  public static RestoreResources create(GpuContext context, CompletionStage<?> behindAfter) {
    return new RestoreResources(context, DEFAULT_STAGING_BUFFERS, DEFAULT_STAGING_BYTES, Staging.DEFAULT_THREADS,
        DEFAULT_UPLOAD_ARENA_BYTES, DEFAULT_EVENTS, behindAfter);
  }

  /**
   * @throws IllegalArgumentException if a count or size is outside what {@link Staging} allows
   */
  public static RestoreResources create(GpuContext context, int stagingBuffers, long stagingBytes, int readThreads,
      long uploadArenaBytes) {
    Staging.checkBuffers(stagingBuffers);
    Staging.checkBytes(stagingBytes);
    Staging.checkThreads(readThreads, "read");
    if (uploadArenaBytes < 4096) {
      throw new IllegalArgumentException("the upload arena must be at least 4 KiB, not " + uploadArenaBytes);
    }
    return new RestoreResources(context, stagingBuffers, stagingBytes, readThreads, uploadArenaBytes,
        DEFAULT_EVENTS, CompletableFuture.completedFuture(null));
  }

  public GpuContext context() {
    return context;
  }

  /**
   * Milliseconds each part took to make, in order ({@code streams}, {@code upload arena}, {@code events} — the
   * first {@value #EVENTS_AHEAD}; the others are made behind — and {@code staging} — its first buffer; the others
   * are pinned behind, see {@link StagingRing#allocate(GpuContext, int, long, int)}).
   */
  public Map<String, Double> creationMillis() {
    return Collections.unmodifiableMap(new LinkedHashMap<>(creationMillis));
  }

  private long part(String name, long since) {
    long now = System.nanoTime();
    creationMillis.put(name, (now - since) / 1e6);
    return now;
  }

  GpuStream stream() {
    return stream;
  }

  GpuStream secondStream() {
    return secondStream;
  }

  /** Where copies from another GPU's memory go (the node-wide HBM tier), beside the host copies. */
  GpuStream peerStream() {
    return peerStream;
  }

  /** The pinned staging that chunks read from the store go through; the restore's own, while it is lent. */
  public StagingRing staging() {
    return staging;
  }

  PinnedBuffer uploadArena() {
    return uploadArena;
  }

  ExecutorService pump() {
    return pump;
  }

  /** The threads that read and verify chunks from the store. */
  public ExecutorService readers() {
    return readers;
  }

  /** A timing event from the pool, or a new one when the pool is empty. Only the borrowing restore calls this. */
  synchronized GpuEvent takeEvent() {
    GpuEvent e = events.poll();
    if (e == null) {
      e = context.createEvent(true);
      allEvents.add(e);
    }
    return e;
  }

  /** Completes once every event of the pool is made (the first few are made at once, the others behind). */
  CompletableFuture<Void> eventsMade() {
    return eventsMade.copy();
  }

  /** Events in the pool now, for tests. */
  synchronized int pooledEvents() {
    return events.size();
  }

  synchronized void giveBack(List<GpuEvent> used) {
    events.addAll(used);
  }

  void borrow() {
    if (closed.get()) {
      throw new IllegalStateException("the restore resources are closed");
    }
    if (!lent.compareAndSet(false, true)) {
      throw new IllegalStateException("these restore resources are lent to a restore that is not closed yet");
    }
  }

  void giveBack() {
    lent.set(false);
  }

  /** Stops the threads and frees the stream, events and pinned memory. Idempotent. */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    closing.complete(null);
    pump.shutdownNow();
    readers.shutdownNow();
    eventsMade.join();
    List<AutoCloseable> all;
    synchronized (this) {
      all = new ArrayList<>(allEvents);
    }
    all.add(staging);
    all.add(uploadArena);
    all.add(peerStream);
    all.add(secondStream);
    all.add(stream);
    RuntimeException failure = null;
    for (AutoCloseable c : all) {
      try {
        c.close();
      } catch (Exception e) {
        failure = failure == null ? new IllegalStateException("closing restore resources failed", e) : failure;
      }
    }
    if (failure != null) {
      throw failure;
    }
  }
}
