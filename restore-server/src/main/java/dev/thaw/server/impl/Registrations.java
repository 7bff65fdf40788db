package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageNotFoundException;
import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.server.FunctionOptions;
import dev.thaw.server.ServeException;
import dev.thaw.server.ServerLogs;
import dev.thaw.server.TenantLimits;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How a function comes to be served under a name: registered by the operator (the configured functions, the admin
 * API) or by a tenant (a function pod, through the node socket, with its key: {@link Tenants}). A local tag is read
 * from the store and served at once. A registry reference is pulled first ({@link ImagePulls}): until its image is
 * in, the function is listed, its state says how the pull goes, and its requests are refused with 503 and
 * {@code Retry-After} (502 once the pull failed, saying why); a function that already served under that name keeps
 * serving its image until the new one is in.
 *
 * <p>Registering a registry reference again with the same options changes nothing (its instances stay warm, nothing
 * is fetched) unless the last attempt failed, which it retries: this is what a function pod does at every start. A
 * reference's tag is resolved to a digest when the function is first registered; to serve a newer image under the
 * same tag, register its digest (or delete the function first).
 *
 * <p>Thread-safe: registrations are serialized on this object; pulls complete them on the pulls' threads.
 */
public final class Registrations implements AutoCloseable {

  private static final Logger LOG = LoggerFactory.getLogger(ServerLogs.INSTANCES);
  /**
   * How long a registration by reference waits for its image before it answers 202: an image the store holds
   * already (a function registered again after the server restarted) is in within milliseconds, and then the
   * registration answers that the function serves.
   */
  static final Duration SETTLE_WAIT = Duration.ofSeconds(2);

  private final Scheduler scheduler;
  private final ChunkStore store;
  private final ImagePulls pulls;
  private final Tenants tenants;
  private final List<DeviceInfo> devices;
  private final Map<String, Registration> current = new HashMap<>();

  /** What a registration answers: its HTTP status (201 new, 200 replaced or unchanged, 202 pulling) and body. */
  public record Outcome(int status, ObjectNode body) {}

  /**
   * @param pulls where registry references are pulled; null when the store is read-only (then only tags register)
   * @param devices the devices instances go on: a tenant function's device memory is bounded by theirs
   */
  Registrations(Scheduler scheduler, ChunkStore store, ImagePulls pulls, TenantLimits limits,
      List<DeviceInfo> devices) {
    this.scheduler = scheduler;
    this.store = store;
    this.pulls = pulls;
    this.tenants = new Tenants(limits);
    this.devices = List.copyOf(devices);
  }

  /** Creates the registrations of a server; {@code pulls} may be null (a read-only store). */
  public static Registrations create(Scheduler scheduler, ChunkStore store, ImagePulls pulls, TenantLimits limits) {
    return new Registrations(scheduler, store, pulls, limits, scheduler.factory().devices());
  }

  Tenants tenants() {
    return tenants;
  }

  /**
   * A function configured at start: a tag is read now; a registry reference is pulled in the background.
   *
   * @throws IllegalArgumentException if a tag's image is missing or unusable, or a reference cannot be pulled here
   */
  public void registerAtStart(String name, FunctionOptions options) {
    try {
      register(name, options, null);
    } catch (ServeException e) {
      // An image that is not in the store is said as such: thaw serve exits 4 for it, as every command does.
      Throwable why = e.code().equals("image_not_found") ? new ImageNotFoundException(options.image()) : e;
      throw new IllegalArgumentException("function '" + name + "': " + e.getMessage(), why);
    }
  }

  /**
   * {@link #register}, then, while its image is being pulled, waits up to {@link #SETTLE_WAIT} for the pull to end:
   * answers 201 or 200 when the function serves by then, else 202. Blocks; not on an event loop.
   *
   * @throws ServeException as {@link #register}, and 403 or 400 when the image came in and cannot be served
   */
  public Outcome registerAndSettle(String name, FunctionOptions options, String tenantKey) {
    Outcome o = register(name, options, tenantKey);
    Registration r;
    synchronized (this) {
      r = current.get(name);
    }
    if (o.status() != 202 || r == null) {
      return o;
    }
    try {
      r.settled.get(SETTLE_WAIT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (TimeoutException | ExecutionException e) {
      return o;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return o;
    }
    synchronized (this) {
      ServeException refused = r.failure;
      if (current.get(name) == r && refused != null) {
        // The image is in and cannot be served (a tenant limit, a function that does not load): the registrant hears
        // why now. The function stays listed with the reason, as when it is found later.
        throw refused.status() >= 500 ? new ServeException(400, refused.code(), refused.getMessage()) : refused;
      }
      if (current.get(name) != r || !r.serving) {
        return outcome(202, r, o.body().hasNonNull("token") ? o.body().get("token").asText() : null);
      }
      return outcome(r.replaced ? 200 : 201, r,
          o.body().hasNonNull("token") ? o.body().get("token").asText() : null);
    }
  }

  /**
   * Registers {@code name}: by the operator ({@code tenantKey} null), or by the tenant that holds {@code tenantKey}
   * (registry references only, within {@link TenantLimits}). Blocks while a tag's image is read from the store.
   *
   * @throws ServeException 400 for a bad reference or options, 403 over a tenant limit, 404 for a tag the store lacks,
   *     409 for a name another tenant (or the operator) holds, 503 when registry references cannot be pulled here
   */
  public synchronized Outcome register(String name, FunctionOptions options, String tenantKey) {
    String image = options.image();
    boolean reference = RegistryReference.looksLikeReference(image);
    if (reference) {
      try {
        RegistryReference.parse(image);
      } catch (IllegalArgumentException e) {
        throw ServeException.badRequest(e.getMessage());
      }
      if (pulls == null) {
        throw new ServeException(400, "read_only_store", "function '" + name + "': the image " + image + " is a "
            + "registry reference, and this server's store is read-only: pull it into the store first (thaw pull)");
      }
    }
    Registration existing = current.get(name);
    Tenants.Claim claim = null;
    if (tenantKey != null) {
      if (!reference) {
        throw new ServeException(403, "tag_not_allowed", "a function registered through the node socket names a "
            + "registry reference (host[:port]/repository[:tag]), not the local tag '" + image + "'");
      }
      tenants.limits().check(options);
      claim = tenants.claim(name, tenantKey, existing != null && !existing.tenant);
    }
    try {
      if (existing != null && reference && existing.sameAs(options) && !existing.failed()) {
        return outcome(existing.serving ? 200 : 202, existing, claim);
      }
      Registration r = new Registration(name, new FunctionOptions(options), claim != null);
      if (!reference) {
        ImageInfo info = read(name, image);
        current.put(name, r);
        boolean replaced = scheduler.register(name, r.options, info);
        operatorTakes(name, claim);
        return outcome(replaced ? 200 : 201, r, claim);
      }
      r.pull = pulls.pull(image, claim != null ? tenants.limits().maxImageBytes() : Long.MAX_VALUE);
      if (r.pull.done()) {
        // The store holds the image already: it serves now, or the registration is refused now.
        ImageInfo info = read(name, r.pull.result().join());
        if (r.tenant) {
          checkTenant(r, info);
        }
        current.put(name, r);
        boolean replaced = scheduler.register(name, r.options, info);
        r.serving = true;
        operatorTakes(name, claim);
        return outcome(replaced ? 200 : 201, r, claim);
      }
      current.put(name, r);
      operatorTakes(name, claim);
      scheduler.await(name, r);
      r.pull.result().whenComplete((tag, e) -> complete(r, tag, e));
      return outcome(202, r, claim);
    } catch (RuntimeException e) {
      if (claim != null && claim.fresh()) {
        tenants.release(name);
      }
      throw e;
    }
  }

  /** A name the operator registers is the operator's, whoever held it. */
  private void operatorTakes(String name, Tenants.Claim claim) {
    if (claim == null) {
      tenants.release(name);
    }
  }

  private ImageInfo read(String name, String tag) {
    try {
      return ImageInfo.read(store, tag);
    } catch (ImageNotFoundException e) {
      throw new ServeException(404, "image_not_found", e.getMessage());
    } catch (RuntimeException e) {
      throw new ServeException(400, "bad_image", "function '" + name + "': " + e.getMessage());
    }
  }

  /** The pull of {@code r} ended: serve its image, unless another registration replaced {@code r} meanwhile. */
  private synchronized void complete(Registration r, String tag, Throwable failed) {
    try {
      settle(r, tag, failed);
    } finally {
      r.settled.complete(null);
    }
  }

  private void settle(Registration r, String tag, Throwable failed) {
    if (current.get(r.name) != r || failed != null) {
      return;
    }
    try {
      ImageInfo info = read(r.name, tag);
      if (r.tenant) {
        checkTenant(r, info);
      }
      r.replaced = scheduler.register(r.name, r.options, info);
      r.serving = true;
      LOG.info("function '{}' serves {} ({})", r.name, r.options.image(), tag);
    } catch (RuntimeException e) {
      r.failure = e instanceof ServeException s ? s : new ServeException(502, "bad_image", "function '" + r.name
          + "': the image " + r.options.image() + " cannot be served: " + e.getMessage());
      LOG.warn("function '{}' does not serve {}: {}", r.name, r.options.image(), r.failure.getMessage());
      scheduler.await(r.name, r);
    }
  }

  /**
   * A tenant's image names a function class the node runs for tenants, and its function may hold no more device
   * memory, all its instances together, than its limit.
   */
  private void checkTenant(Registration r, ImageInfo info) {
    tenants.limits().checkFunction(info.manifest().function().className());
    long limit = tenants.limits().maxDeviceBytes();
    if (limit == 0) {
      limit = devices.stream().mapToLong(DeviceInfo::totalMemoryBytes).min().orElse(0) / 2;
    }
    long asked = info.deviceBytes() * r.options.maxInstances();
    if (asked > limit) {
      throw TenantLimits.overLimit("function '" + r.name + "' would hold " + asked + " bytes of device memory ("
          + info.deviceBytes() + " per instance, maxInstances " + r.options.maxInstances() + "), over this node's "
          + "limit for tenants (maxDeviceBytes " + limit + ")");
    }
  }

  private Outcome outcome(int status, Registration r, Tenants.Claim claim) {
    return outcome(status, r, claim == null ? null : claim.token());
  }

  private Outcome outcome(int status, Registration r, String token) {
    ObjectNode body = scheduler.status(r.name);
    if (r.pull != null && !r.serving) {
      body.set("pull", r.pull.json());
    }
    if (token != null) {
      body.put("token", token);
    }
    return new Outcome(status, body);
  }

  /**
   * Stops serving {@code name}: by the operator ({@code tenantKey} null), or by the tenant that holds it.
   *
   * @throws ServeException 404 for no such function, or one this key does not hold
   */
  public synchronized CompletableFuture<Void> unregister(String name, String tenantKey) {
    if (tenantKey != null && !tenants.holds(name, tenantKey)) {
      throw ServeException.notFound(name);
    }
    CompletableFuture<Void> gone = scheduler.unregister(name);
    current.remove(name);
    tenants.release(name);
    return gone;
  }

  /** Stops the pulls: nothing is written to the store after this returns. */
  @Override
  public void close() {
    if (pulls != null) {
      pulls.close();
    }
  }

  /** One registration of a name; a function waiting for its image is refused by it. */
  private final class Registration implements Scheduler.Awaiting {
    final String name;
    final FunctionOptions options;
    final boolean tenant;
    ImagePulls.Pull pull;
    /** Why its image, pulled, cannot be served (a bad image, a tenant limit); null while none. */
    volatile ServeException failure;
    volatile boolean serving;
    /** Whether serving it replaced a function of that name. */
    volatile boolean replaced;
    /** Completes once its pull ended and the registration acted on it. */
    final CompletableFuture<Void> settled = new CompletableFuture<>();

    Registration(String name, FunctionOptions options, boolean tenant) {
      this.name = name;
      this.options = options;
      this.tenant = tenant;
    }

    boolean sameAs(FunctionOptions o) {
      return options.toJson().equals(o.toJson());
    }

    boolean failed() {
      return failure != null || pull != null && pull.failed();
    }

    @Override
    public ServeException refusal() {
      return failure != null ? failure : pull.refusal(name);
    }

    @Override
    public ObjectNode state() {
      ObjectNode s = JsonNodeFactory.instance.objectNode();
      s.set("options", options.toJson());
      s.put("state", failed() ? "failed" : "pulling");
      s.set("pull", pull.json());
      if (failure != null) {
        s.put("error", failure.getMessage());
      }
      return s;
    }
  }
}
