package dev.thaw.pool;

import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.pool.hbm.ExportedSlab;
import dev.thaw.pool.hbm.HbmTier;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A pooled worker process handed out by {@link ContextPool#acquire}: warm, with a context on one device,
 * belonging to its caller alone until {@link #release()} or {@link #evict()}.
 *
 * <p>A worker becomes <em>one</em> image in its life ({@link #become}), then serves requests ({@link #invoke}).
 * Requests may overlap: a worker whose function serves several at once batches them, any other serves them in the
 * order sent; nothing else (a BECOME, an export) overlaps a request. Async methods return a {@link CompletableFuture}; each has a blocking twin. Every operation
 * has a deadline (from {@link ContextPoolOptions}, or given): a worker that misses it is killed.
 *
 * <p>Failures are {@link WorkerException}s. When {@link WorkerException#workerLost()} — the process crashed,
 * missed a deadline, broke the protocol or hit a sticky CUDA error — the worker is dead, the pool replaces it,
 * and every later call on this handle fails the same way. Other failures (a bad request, an image that does
 * not restore, out of memory) leave it alive.
 */
public interface Worker extends AutoCloseable {

  /** The worker's process id. */
  long pid();

  /** The device ordinal it runs on. */
  int device();

  /** How its start went. */
  WorkerStart start();

  /**
   * The other devices whose links this worker holds open for its restore ({@link ContextPoolOptions#helperLinks()}),
   * as its last READY said: a worker warming up after READY names them in its second. Empty for none.
   */
  List<Integer> helperLinks();

  /** The image it became, or null. */
  String image();

  /** False once the process is gone or the handle released. */
  boolean isAlive();

  /**
   * Completes, with why, when the worker ends: lost (crashed, killed, hung) or retired. A holder learns here that an
   * idle worker died, before it sends the next request.
   */
  CompletableFuture<WorkerException> ended();

  /**
   * Restores an image: the worker maps its allocations at their recorded addresses, loads its modules, reads the
   * host state and starts copying its bytes from {@code source} (the host cache's, verified when they entered it,
   * or the store's, verified on the way); with {@link ContextPoolOptions#awaitResident()} off (the default) it
   * answers as soon as the function can be invoked, each launch waiting on the device for what it touches, and
   * {@link #resident()} completes when the last byte lands.
   *
   * @param name names the image in messages and status (its tag)
   * @param manifest the image's manifest, as stored
   * @throws IllegalStateException (at once) if this worker already became an image or is busy
   */
  CompletableFuture<BecomeResult> become(String name, byte[] manifest, ImageSource source);

  BecomeResult becomeBlocking(String name, byte[] manifest, ImageSource source);

  /**
   * Like {@link #become(String, byte[], ImageSource)} for an image the pool had its workers prepare
   * ({@link ContextPool#prepare}): when this worker prepared it, the BECOME names it instead of carrying its
   * manifest, and the worker only maps memory and starts copying; else (its PREPARE failed, or it came too late)
   * the image is sent whole. A PREPARE still running is waited for: the worker would finish it before a BECOME.
   */
  CompletableFuture<BecomeResult> become(PreparedImage image, ImageSource source);

  BecomeResult becomeBlocking(PreparedImage image, ImageSource source);

  /**
   * Restores a group image's ranks at once and serves the group: rank 0 onto this worker's device, rank r onto
   * {@code ranks.get(r).device()} in a context of this worker's process, each from its own source through its own
   * device's link (see {@link #become} for the rest). {@link #resident()} completes when every rank's last byte
   * landed. A worker that became a group is never recycled: {@link #release()} ends it.
   *
   * @param name names the group in messages and status (its tag)
   * @param prepared the group as the pool has its workers prepare it ({@link PreparedImage#group}), or null: named to
   *     the worker when it prepared it for these very devices (rank r on its own device + r, modulo the node's), so
   *     that it only maps and copies; else every rank goes whole
   * @throws IllegalArgumentException (at once) if there are fewer than two ranks, rank 0 is not on this worker's
   *     device, or two ranks share a device
   * @throws IllegalStateException (at once) if this worker already became an image or is busy
   */
  CompletableFuture<BecomeResult> becomeGroup(String name, List<RankImage> ranks, PreparedImage prepared);

  BecomeResult becomeGroupBlocking(String name, List<RankImage> ranks, PreparedImage prepared);

  /**
   * Completes when the restore a {@link #become} started has every byte on the device (with on-demand restore,
   * after the BECOME answered and the function already served); fails as the worker does.
   */
  CompletableFuture<RestoreCompletion> resident();

  /**
   * Serves one request.
   *
   * @param json the request's JSON object, UTF-8
   * @param binary raw bytes beside it, or null
   * @param deadline how long the worker may take, or null for {@link ContextPoolOptions#invokeTimeout()}
   * @throws IllegalStateException (at once) if the worker has not become an image, or a BECOME or export runs
   */
  CompletableFuture<InvokeResult> invoke(byte[] json, ByteBuffer binary, Duration deadline);

  default CompletableFuture<InvokeResult> invoke(byte[] json) {
    return invoke(json, null, null);
  }

  /**
   * Serves one request whose response may come in parts: each part the function sends reaches {@code stream} (on the
   * pool's reader thread, in order, before the future completes) when {@link ResponseStream#streamed()}; cancelling
   * {@code stream} asks the worker to end the request (the function stops at its next step and answers with what it
   * has, completing the future as usual). A streamed request's deadline starts again at each part.
   *
   * @throws IllegalStateException (at once) if the worker has not become an image, or a BECOME or export runs
   */
  CompletableFuture<InvokeResult> invoke(byte[] json, ByteBuffer binary, Duration deadline, ResponseStream stream);

  InvokeResult invokeBlocking(byte[] json, ByteBuffer binary, Duration deadline);

  default InvokeResult invokeBlocking(byte[] json) {
    return invokeBlocking(json, null, null);
  }

  /**
   * Exports the read-only slabs of its image (wholly resident) as POSIX descriptors of the worker's process, for
   * {@link HbmTier#offer} to take before the worker is released. Only slabs created exportable
   * (a BECOME whose source carried the HBM tier) are there; none is an empty list.
   *
   * @throws IllegalStateException (at once) if the worker has not become an image or is busy
   */
  CompletableFuture<List<ExportedSlab>> exportReadOnly();

  /**
   * The HBM tier took the slabs of the last {@link #exportReadOnly()} ({@link HbmTier#offer} said true): their memory
   * is the tier's now, so a worker that drops its image ({@link #release()}) neither scrubs nor writes it. Without
   * this call every slab the worker releases is scrubbed.
   */
  void exportKept();

  /**
   * The timeline of the restore {@link #become} started, from the worker, placed on this process's clock: its
   * BECOME's phases, each copy on the restore stream (runs of them coalesced beyond {@code maxSpans}, said in the
   * trace) and the first launch. Ask once {@link #resident()} completed; it is answered after the requests sent
   * before it, and may be asked while a request runs.
   *
   * @throws IllegalStateException (at once) if the worker has not become an image
   */
  CompletableFuture<WorkerTimeline> restoreTimeline(int maxSpans);

  /** Asks the worker what it is doing; answered even while it restores or serves. */
  CompletableFuture<WorkerStatus> status();

  /**
   * Invokes this worker announced as nearly done ({@link ContextPoolOptions#wakeAhead}: it sent NEAR), and of
   * those, the ones whose answer the pool's reader polled for and caught, in that order.
   */
  long[] wakeAheads();

  /**
   * Done with this worker. One that never became an image goes back to the pool's idle set. One that did is asked to
   * drop the image and become blank again (its device memory scrubbed and freed, its state forgotten), and goes back
   * once it said so, while {@link ContextPoolOptions#recycleLimit()} allows; else, or when it cannot drop the image
   * cleanly, it exits (its device memory goes with its process). Either way no later caller sees this one's data.
   */
  void release();

  /** Kills the worker now. */
  void evict();

  /** {@link #release()}. */
  @Override
  void close();
}
