package dev.thaw.examples.collective;

import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuEvent;
import dev.thaw.runtime.gpu.GpuStream;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The ranks of a tensor-parallel group in one process, and Thaw's collectives between them: one stream per rank,
 * each on its own device, every pair of devices peers; a thread per rank that issues that rank's work
 * ({@link #run}); and the exchanges ({@link #allReduceAdd}, {@link #allGatherColumns}) through {@link PeerBuffer}s,
 * read directly over the peer links by {@link CollectiveKernels}. No NCCL: the state is the buffers' mappings and a
 * few events.
 *
 * <h2>Ordering</h2>
 * An exchange by rank r records r's <i>ready</i> event (everything r queued so far, its partial included, is done
 * when it completes), meets the other ranks' threads ({@link RankBarrier}: every rank has recorded before any waits),
 * makes r's stream wait for every other rank's ready event ({@code cuStreamWaitEvent} across devices) and launches
 * the kernel that reads all ranks' buffers. So a kernel never reads a partial before it is written. A partial is
 * never overwritten while a peer may still read it provided a rank alternates between two buffers in consecutive
 * exchanges, as a Llama layer's attention and MLP partials do: rank q writes buffer A again only after its next
 * exchange (through B), which waited for every rank's ready event of B, recorded after that rank's read of A. The
 * ready events alternate by exchange parity, so a rank that runs ahead records into the event its slower peers are
 * not about to wait on.
 *
 * <h2>Failures</h2>
 * A rank whose issuing throws breaks the barrier: the other ranks' threads stop at their next exchange instead of
 * waiting for it, and {@link #run} throws the first failure. Every event a stream waits on was recorded before the
 * wait was queued, so no stream waits on work that will never be queued. A fault on the device (a sticky error)
 * poisons every context of the process: the whole group fails together, and the owner discards it.
 */
public final class PeerGroup implements AutoCloseable {

  /** Work a rank's thread issues: queues kernels on that rank's stream, exchanges through this group. */
  @FunctionalInterface
  public interface RankWork {
    void issue(int rank) throws Exception;
  }

  private final GpuDriver driver;
  private final List<GpuStream> streams;
  private final List<GpuContext> contexts;
  private final CollectiveKernels[] kernels;
  /** Per rank, two ready events, used by exchange parity. */
  private final GpuEvent[][] ready;
  /** Per rank, the exchanges it made in the current run; touched only by the rank's thread. */
  private final long[] exchanges;
  private final ExecutorService[] issuers;
  private final Thread[] issuerThreads;
  private final RankBarrier barrier;
  private final List<PeerBuffer> buffers = new ArrayList<>();
  private final AtomicBoolean closed = new AtomicBoolean();

  private PeerGroup(GpuDriver driver, List<GpuStream> streams) {
    this.driver = driver;
    this.streams = List.copyOf(streams);
    this.contexts = streams.stream().map(GpuStream::context).toList();
    int n = streams.size();
    this.kernels = new CollectiveKernels[n];
    this.ready = new GpuEvent[n][2];
    this.exchanges = new long[n];
    this.issuers = new ExecutorService[n];
    this.issuerThreads = new Thread[n];
    this.barrier = new RankBarrier(n);
  }

  /**
   * A group over {@code streams}, rank r issuing on {@code streams.get(r)}.
   *
   * @throws IllegalArgumentException unless there are 1 to {@link CollectiveKernels#MAX_RANKS} streams of one driver,
   *     each on another device, and every two of those devices are peers ({@link GpuDriver#canAccessPeer})
   */
  public static PeerGroup open(List<GpuStream> streams) {
    checkRanks(streams);
    GpuDriver driver = streams.get(0).context().driver();
    PeerGroup group = new PeerGroup(driver, streams);
    try {
      group.start();
      return group;
    } catch (RuntimeException e) {
      group.close();
      throw e;
    }
  }

  /**
   * Why {@code devices} cannot hold a group's ranks (too few or too many, one named twice, one that does not exist,
   * two that are not peers), or null when they can.
   */
  public static String whyUnusable(GpuDriver driver, int[] devices) {
    if (devices.length < 1 || devices.length > CollectiveKernels.MAX_RANKS) {
      return "a group has 1 to " + CollectiveKernels.MAX_RANKS + " ranks, not " + devices.length;
    }
    int visible = driver.devices().size();
    Set<Integer> seen = new HashSet<>();
    for (int d : devices) {
      if (d < 0 || d >= visible) {
        return "no device " + d + ": " + visible + " visible, so at most " + visible + " ranks";
      }
      if (!seen.add(d)) {
        return "device " + d + " is named twice: each rank needs a device of its own";
      }
    }
    for (int a : devices) {
      for (int b : devices) {
        if (a != b && !driver.canAccessPeer(a, b)) {
          return "devices " + a + " and " + b + " are not peers (cuDeviceCanAccessPeer): a group's ranks read each "
              + "other's memory over NVLink or a peer-capable PCIe switch";
        }
      }
    }
    return null;
  }

  private static void checkRanks(List<GpuStream> streams) {
    if (streams.isEmpty()) {
      throw new IllegalArgumentException("a group needs at least one rank");
    }
    GpuDriver driver = streams.get(0).context().driver();
    int[] devices = new int[streams.size()];
    for (int r = 0; r < devices.length; r++) {
      GpuContext c = streams.get(r).context();
      if (c.driver() != driver) {
        throw new IllegalArgumentException("rank " + r + "'s stream is of another driver than rank 0's");
      }
      devices[r] = c.device().ordinal();
    }
    String why = whyUnusable(driver, devices);
    if (why != null) {
      throw new IllegalArgumentException(why);
    }
  }

  private void start() {
    for (int r = 0; r < streams.size(); r++) {
      kernels[r] = CollectiveKernels.load(contexts.get(r));
      ready[r][0] = contexts.get(r).createEvent(false);
      ready[r][1] = contexts.get(r).createEvent(false);
      int rank = r;
      issuers[r] = Executors.newSingleThreadExecutor(task -> {
        Thread t = new Thread(task, "thaw-tp-rank-" + rank);
        t.setDaemon(true);
        issuerThreads[rank] = t;
        return t;
      });
    }
  }

  public GpuDriver driver() {
    return driver;
  }

  public int size() {
    return streams.size();
  }

  public GpuStream stream(int rank) {
    return streams.get(rank);
  }

  public GpuContext context(int rank) {
    return contexts.get(rank);
  }

  /** A buffer of {@code bytes} on every rank, readable by every other rank; closed with the group at the latest. */
  public PeerBuffer allocate(String name, long bytes) {
    checkOpen();
    PeerBuffer b = PeerBuffer.allocate(name, bytes, contexts);
    synchronized (buffers) {
      buffers.add(b);
    }
    return b;
  }

  /**
   * Runs {@code work} for every rank at once, each on its rank's thread, and returns when every rank has issued its
   * part (not when the devices have run it). One run at a time.
   *
   * @throws RuntimeException the first rank's failure (a checked one wrapped), the others' added as suppressed
   */
  public synchronized void run(RankWork work) {
    checkOpen();
    barrier.reset();
    List<Future<?>> done = new ArrayList<>(issuers.length);
    for (int r = 0; r < issuers.length; r++) {
      int rank = r;
      done.add(issuers[r].submit(() -> {
        exchanges[rank] = 0;
        try {
          work.issue(rank);
        } catch (Throwable t) {
          barrier.breakWith(t);
          throw t;
        }
        return null;
      }));
    }
    Throwable first = null;
    List<Throwable> others = new ArrayList<>();
    boolean interrupted = false;
    for (Future<?> f : done) {
      for (;;) {
        try {
          f.get();
          break;
        } catch (InterruptedException e) {
          interrupted = true;
        } catch (ExecutionException | CancellationException e) {
          Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
          if (cause instanceof RankBarrier.BrokenException) {
            others.add(cause);
          } else if (first == null) {
            first = cause;
          } else {
            others.add(cause);
          }
          break;
        }
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
    if (first == null && !others.isEmpty()) {
      first = others.remove(0);
    }
    if (first != null) {
      others.forEach(first::addSuppressed);
      if (first instanceof RuntimeException re) {
        throw re;
      }
      if (first instanceof Error err) {
        throw err;
      }
      throw new IllegalStateException("a rank failed: " + first, first);
    }
  }

  /**
   * From rank {@code rank}'s thread inside {@link #run}: once every rank has written its partial (each rank's buffer
   * of {@code partials}, {@code n} elements of {@code type}), adds their sum to {@code x} (fp32 [n], this rank's
   * memory). Every rank calls it at the same point of its work.
   */
  public void allReduceAdd(int rank, PeerBuffer partials, long x, long n, PartialType type) {
    if (partials.bytes() < n * type.bytes()) {
      throw new IllegalArgumentException(n + " elements of " + type + " do not fit in " + partials);
    }
    exchange(rank);
    kernels[rank].allReduceAdd(streams.get(rank), x, partials.addresses(), size(), n, type);
  }

  /**
   * From rank {@code rank}'s thread inside {@link #run}: once every rank has written its slice (each rank's buffer
   * of {@code slices}: columns {@link CollectiveKernels#sliceStart} of its rank, [M, width] fp32), writes the whole
   * [M, V] fp32 matrix to {@code out}, this rank's memory.
   */
  public void allGatherColumns(int rank, PeerBuffer slices, long out, int M, int V) {
    long widest = 0;
    for (int r = 0; r < size(); r++) {
      widest = Math.max(widest, CollectiveKernels.sliceStart(V, r + 1, size()) - CollectiveKernels.sliceStart(V, r,
          size()));
    }
    if (slices.bytes() < 4L * M * widest) {
      throw new IllegalArgumentException(M + " rows of " + widest + " floats do not fit in " + slices);
    }
    exchange(rank);
    kernels[rank].allGatherColumns(streams.get(rank), out, slices.addresses(), size(), M, V);
  }

  /** Publishes what rank queued so far, meets the other ranks, and makes its stream wait for theirs. */
  private void exchange(int rank) {
    checkOpen();
    if (Thread.currentThread() != issuerThreads[rank]) {
      throw new IllegalStateException("rank " + rank + "'s exchanges are made on its own thread, inside run()");
    }
    if (size() == 1) {
      return;
    }
    int parity = (int) (exchanges[rank]++ & 1);
    GpuStream own = streams.get(rank);
    ready[rank][parity].record(own);
    barrier.await();
    for (int q = 0; q < size(); q++) {
      if (q != rank) {
        own.waitFor(ready[q][parity]);
      }
    }
  }

  /** Waits for every rank's stream; reports the first asynchronous error. */
  public void synchronize() {
    checkOpen();
    for (GpuStream s : streams) {
      s.synchronize();
    }
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new IllegalStateException("the peer group is closed");
    }
  }

  /**
   * Stops the issuing threads and frees the group's buffers, events and modules; the streams stay their owners'.
   * Work still queued that reads the buffers must be done (or the devices poisoned) first. Idempotent.
   */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    for (ExecutorService e : issuers) {
      if (e != null) {
        e.shutdownNow();
      }
    }
    synchronized (buffers) {
      buffers.forEach(PeerBuffer::close);
      buffers.clear();
    }
    for (int r = 0; r < kernels.length; r++) {
      for (GpuEvent e : ready[r]) {
        if (e != null) {
          e.close();
        }
      }
      if (kernels[r] != null) {
        kernels[r].close();
      }
    }
  }
}
