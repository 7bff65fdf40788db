package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.registry.ImagePull;
import dev.thaw.image.registry.ImagePuller;
import dev.thaw.image.registry.RegistryOptions;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.registry.ThawArtifact;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.TenantLimits;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Images pulled from OCI registries into the server's store, for functions registered by a registry reference: the
 * reference is resolved to its manifest's digest, and the image pulled ({@link ImagePuller}: blobs in the image's
 * first-access order, every chunk verified before it enters the store) unless the store holds it already. At most
 * {@code maxPulls} run at once; the others wait in order.
 *
 * <p>Invariants: an image is committed under the tag {@code sha256-<hex>} of its OCI manifest's digest, and only
 * once every chunk is in the store, so a tag never names two images and two references to one image (or two
 * tenants registering it) share its tag, its store bytes and its host-cache and HBM-tier copies. One pull per
 * reference (and size limit) runs at a time; one that failed is replaced by a new attempt when it is asked for
 * again, never retried on its own.
 *
 * <p>Thread-safe.
 */
public final class ImagePulls implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(ServerLogs.INSTANCES);
  private static final String TAG_PREFIX = "sha256-";
  /** Pulls remembered (done or failed ones beyond it are forgotten, oldest first; their images stay in the store). */
  static final int MAX_REMEMBERED = 1024;

  private final ChunkStore store;
  private final RegistryOptions options;
  private final long retryAfterSeconds;
  private final ExecutorService pullers;
  private final Map<String, Pull> pulls = new LinkedHashMap<>();
  /** Per local tag, the pull writing it now: a second reference to the same image waits for it. */
  private final Map<String, CompletableFuture<Void>> writing = new HashMap<>();
  private boolean closed;

  /**
   * @param store the server's store, written to (it must not be read-only)
   * @param maxPulls pulls that run at once
   */
  public ImagePulls(ChunkStore store, RegistryOptions options, int maxPulls, long retryAfterSeconds) {
    this.store = store;
    this.options = new RegistryOptions(options);
    this.retryAfterSeconds = Math.max(1, retryAfterSeconds);
    this.pullers = Executors.newFixedThreadPool(maxPulls, Threads.daemonFactory("thaw-image-pull"));
  }

  /** The local tag an image with this OCI manifest digest is committed under. */
  public static String localTag(Digest manifestDigest) {
    return TAG_PREFIX + manifestDigest.hex();
  }

  /**
   * The pull of {@code reference}: the one running or done, or a new one (started now) when there is none or the
   * last one failed.
   *
   * @param maxImageBytes the largest image it may fetch ({@link Long#MAX_VALUE}: no limit); larger fails it
   * @throws IllegalArgumentException if {@code reference} is not a registry reference
   */
  public synchronized Pull pull(String reference, long maxImageBytes) {
    if (closed) {
      throw new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds);
    }
    RegistryReference ref = RegistryReference.parse(reference);
    String key = ref + " " + maxImageBytes;
    Pull p = pulls.get(key);
    if (p != null && !p.failed() && !(p.done() && store.manifest(p.result.join()).isEmpty())) {
      return p;
    }
    Pull fresh = new Pull(ref, maxImageBytes);
    pulls.remove(key);
    pulls.put(key, fresh);
    if (pulls.size() > MAX_REMEMBERED) {
      pulls.values().removeIf(x -> x != fresh && x.result.isDone() && pulls.size() > MAX_REMEMBERED);
    }
    try {
      pullers.execute(fresh::run);
    } catch (RejectedExecutionException e) {
      fresh.fail(new ServeException(503, "draining", "the server is shutting down", retryAfterSeconds));
    }
    return fresh;
  }

  /** One reference's pull: resolving, pulling, pulled or failed. */
  public final class Pull {
    private final RegistryReference reference;
    private final long maxImageBytes;
    private final CompletableFuture<String> result = new CompletableFuture<>();
    private final long createdNanos = System.nanoTime();
    private volatile String state = "queued";
    private volatile Digest digest;
    private volatile ImagePull running;
    private volatile long imageBytes = -1;
    private volatile boolean reused;
    private volatile double seconds;
    private volatile Throwable failure;

    Pull(RegistryReference reference, long maxImageBytes) {
      this.reference = reference;
      this.maxImageBytes = maxImageBytes;
    }

    /** Completes with the image's local tag once it is in the store, or with the failure. */
    public CompletableFuture<String> result() {
      return result;
    }

    public boolean done() {
      return result.isDone() && !result.isCompletedExceptionally();
    }

    public boolean failed() {
      return result.isCompletedExceptionally();
    }

    /** Why the failed pull failed, or null. */
    public Throwable failure() {
      return failure;
    }

    public String reference() {
      return reference.toString();
    }

    /** What a request for a function waiting for this pull gets: 503 while it runs, 502 once it failed. */
    public ServeException refusal(String function) {
      Throwable f = failure;
      if (f != null) {
        if (f instanceof ServeException s && s.status() == 403) {
          return s;
        }
        return new ServeException(502, "image_pull_failed", "function '" + function + "': pulling " + reference
            + " failed: " + message(f) + " (register the function again to retry)");
      }
      ImagePull r = running;
      long total = imageBytes;
      String progress = r != null && total > 0
          ? " (" + r.bytesDownloaded() / (1 << 20) + " of " + total / (1 << 20) + " MiB so far)" : "";
      return new ServeException(503, "image_pulling", "function '" + function + "' is not served yet: its image "
          + reference + " is being pulled" + progress, retryAfterSeconds);
    }

    /** {@code {"reference", "state", "digest", "tag", "imageBytes", "downloadedBytes", "seconds", "error"}}. */
    public ObjectNode json() {
      ObjectNode o = JsonNodeFactory.instance.objectNode();
      o.put("reference", reference.toString());
      o.put("state", failure != null ? "failed" : state);
      Digest d = digest;
      if (d != null) {
        o.put("digest", d.toString());
        o.put("tag", localTag(d));
      }
      if (imageBytes >= 0) {
        o.put("imageBytes", imageBytes);
      }
      ImagePull r = running;
      if (r != null) {
        o.put("downloadedBytes", r.bytesDownloaded());
      }
      if (reused) {
        o.put("reused", true);
      }
      o.put("seconds", done() || failure != null ? seconds : (System.nanoTime() - createdNanos) / 1e9);
      if (failure != null) {
        o.put("error", message(failure));
      }
      return o;
    }

    private void run() {
      try {
        state = "resolving";
        Digest d = reference.digest() != null ? reference.digest() : new ImagePuller(options).resolve(reference);
        digest = d;
        String tag = localTag(d);
        CompletableFuture<Void> mine = new CompletableFuture<>();
        CompletableFuture<Void> other;
        synchronized (ImagePulls.this) {
          other = writing.putIfAbsent(tag, mine);
        }
        if (other != null) {
          // Another reference to the same image is being pulled: this one is done when that one is.
          other.join();
        }
        try {
          if (other == null || store.manifest(tag).isEmpty()) {
            fetch(d, tag);
          } else {
            reused = true;
          }
        } finally {
          if (other == null) {
            synchronized (ImagePulls.this) {
              writing.remove(tag);
            }
            mine.complete(null);
          }
        }
        seconds = (System.nanoTime() - createdNanos) / 1e9;
        state = "pulled";
        running = null;
        result.complete(tag);
      } catch (RuntimeException | Error e) {
        fail(e);
      }
    }

    /** Pulls the image at digest {@code d} under {@code tag}, unless the store has it. */
    private void fetch(Digest d, String tag) {
      if (store.manifest(tag).isPresent()) {
        reused = true;
        return;
      }
      state = "pulling";
      RegistryReference pinned = new RegistryReference(reference.registry(), reference.repository(),
          reference.tag(), d);
      try (ImagePull pull = new ImagePuller(options).open(pinned, store, tag)) {
        long bytes = 0;
        for (ThawArtifact.ChunkRef c : pull.order()) {
          bytes += c.length();
        }
        imageBytes = bytes;
        if (bytes > maxImageBytes) {
          throw TenantLimits.overLimit("the image " + reference + " has " + bytes + " bytes, over this node's "
              + "limit for tenants (maxImageBytes " + maxImageBytes + ")");
        }
        running = pull;
        ImagePull.Result r = pull.start().await();
        LOG.info("{}: pulled as {}: {} of {} blobs fetched, {} MiB in {} s", reference, tag, r.fetched(), r.blobs(),
            r.bytesDownloaded() >> 20, String.format("%.2f", r.seconds()));
      }
    }

    private void fail(Throwable e) {
      failure = e;
      seconds = (System.nanoTime() - createdNanos) / 1e9;
      running = null;
      LOG.warn("{}: pull failed: {}", reference, message(e));
      result.completeExceptionally(e);
    }
  }

  private static String message(Throwable e) {
    String m = e.getMessage();
    return m == null || m.isBlank() ? e.getClass().getSimpleName() : m;
  }

  /** Stops every pull (none commits after this returns) and waits for their threads. Idempotent. */
  @Override
  public void close() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    pullers.shutdownNow();
    try {
      if (!pullers.awaitTermination(30, TimeUnit.SECONDS)) {
        LOG.warn("image pulls still running 30 s after the server closed");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
