package dev.thaw.image.registry;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/** How Thaw talks to OCI registries: retries, upload sizes, the manifest limit, packing, parallelism. */
public final class RegistryOptions {

  /** Attempts per request (the first included) before a 5xx, a 429 or a lost connection is final. */
  public static final int DEFAULT_MAX_ATTEMPTS = 6;
  public static final Duration DEFAULT_INITIAL_BACKOFF = Duration.ofMillis(100);
  public static final Duration DEFAULT_MAX_BACKOFF = Duration.ofSeconds(5);
  /** A Retry-After longer than this fails the request rather than stall a push for minutes. */
  public static final Duration DEFAULT_MAX_RETRY_AFTER = Duration.ofSeconds(60);
  /** Blobs up to this size are uploaded in one PUT; larger ones in PATCH parts of {@link #uploadPartBytes}. */
  public static final int DEFAULT_MONOLITHIC_LIMIT = 16 << 20;
  public static final int DEFAULT_UPLOAD_PART_BYTES = 8 << 20;
  /** Many registries refuse a manifest over 4 MiB (distribution, Harbor, GHCR, ECR): Thaw never writes one. */
  public static final int DEFAULT_MAX_MANIFEST_BYTES = 4 << 20;
  /** A pack is closed at a content-defined chunk boundary once it holds this much... */
  public static final int DEFAULT_PACK_MIN_BYTES = 4 << 20;
  /** ...and always before it would pass this. */
  public static final int DEFAULT_PACK_MAX_BYTES = 32 << 20;
  public static final int DEFAULT_TRANSFERS = 4;
  public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(10);
  /** The longest one request may take, its response's body read whole included. */
  public static final Duration DEFAULT_REQUEST_TIMEOUT = Duration.ofMinutes(5);
  /** The longest a registry may go without sending a byte while a response is awaited or read. */
  public static final Duration DEFAULT_READ_TIMEOUT = Duration.ofSeconds(30);

  /** How an image's chunks become blobs. */
  public enum BlobLayout {
    /** One blob per chunk while the OCI manifest fits in {@link #maxManifestBytes}; packs beyond. */
    AUTO,
    /** Always one blob per chunk (a push fails if the manifest would be too large). */
    CHUNKS,
    /** Always packs of consecutive chunks. */
    PACKS
  }

  private int maxAttempts = DEFAULT_MAX_ATTEMPTS;
  private Duration initialBackoff = DEFAULT_INITIAL_BACKOFF;
  private Duration maxBackoff = DEFAULT_MAX_BACKOFF;
  private Duration maxRetryAfter = DEFAULT_MAX_RETRY_AFTER;
  private int monolithicLimit = DEFAULT_MONOLITHIC_LIMIT;
  private int uploadPartBytes = DEFAULT_UPLOAD_PART_BYTES;
  private int maxManifestBytes = DEFAULT_MAX_MANIFEST_BYTES;
  private int packMinBytes = DEFAULT_PACK_MIN_BYTES;
  private int packMaxBytes = DEFAULT_PACK_MAX_BYTES;
  private BlobLayout blobLayout = BlobLayout.AUTO;
  private int transfers = DEFAULT_TRANSFERS;
  private Duration connectTimeout = DEFAULT_CONNECT_TIMEOUT;
  private Duration requestTimeout = DEFAULT_REQUEST_TIMEOUT;
  private Duration readTimeout = DEFAULT_READ_TIMEOUT;
  private final Set<String> plainHttp = new LinkedHashSet<>();
  private final List<String> mountFrom = new ArrayList<>();
  private RegistryCredentials credentials = RegistryCredentials.NONE;

  public RegistryOptions() {}

  public RegistryOptions(RegistryOptions o) {
    maxAttempts = o.maxAttempts;
    initialBackoff = o.initialBackoff;
    maxBackoff = o.maxBackoff;
    maxRetryAfter = o.maxRetryAfter;
    monolithicLimit = o.monolithicLimit;
    uploadPartBytes = o.uploadPartBytes;
    maxManifestBytes = o.maxManifestBytes;
    packMinBytes = o.packMinBytes;
    packMaxBytes = o.packMaxBytes;
    blobLayout = o.blobLayout;
    transfers = o.transfers;
    connectTimeout = o.connectTimeout;
    requestTimeout = o.requestTimeout;
    readTimeout = o.readTimeout;
    plainHttp.addAll(o.plainHttp);
    mountFrom.addAll(o.mountFrom);
    credentials = o.credentials;
  }

  public int maxAttempts() {
    return maxAttempts;
  }

  public RegistryOptions setMaxAttempts(int maxAttempts) {
    this.maxAttempts = positive(maxAttempts, "maxAttempts");
    return this;
  }

  public Duration initialBackoff() {
    return initialBackoff;
  }

  public RegistryOptions setInitialBackoff(Duration initialBackoff) {
    this.initialBackoff = initialBackoff;
    return this;
  }

  public Duration maxBackoff() {
    return maxBackoff;
  }

  public RegistryOptions setMaxBackoff(Duration maxBackoff) {
    this.maxBackoff = maxBackoff;
    return this;
  }

  public Duration maxRetryAfter() {
    return maxRetryAfter;
  }

  public RegistryOptions setMaxRetryAfter(Duration maxRetryAfter) {
    this.maxRetryAfter = maxRetryAfter;
    return this;
  }

  public int monolithicLimit() {
    return monolithicLimit;
  }

  public RegistryOptions setMonolithicLimit(int monolithicLimit) {
    this.monolithicLimit = positive(monolithicLimit, "monolithicLimit");
    return this;
  }

  public int uploadPartBytes() {
    return uploadPartBytes;
  }

  public RegistryOptions setUploadPartBytes(int uploadPartBytes) {
    this.uploadPartBytes = positive(uploadPartBytes, "uploadPartBytes");
    return this;
  }

  public int maxManifestBytes() {
    return maxManifestBytes;
  }

  public RegistryOptions setMaxManifestBytes(int maxManifestBytes) {
    this.maxManifestBytes = positive(maxManifestBytes, "maxManifestBytes");
    return this;
  }

  public int packMinBytes() {
    return packMinBytes;
  }

  public RegistryOptions setPackMinBytes(int packMinBytes) {
    this.packMinBytes = positive(packMinBytes, "packMinBytes");
    return this;
  }

  public int packMaxBytes() {
    return packMaxBytes;
  }

  public RegistryOptions setPackMaxBytes(int packMaxBytes) {
    this.packMaxBytes = positive(packMaxBytes, "packMaxBytes");
    return this;
  }

  public BlobLayout blobLayout() {
    return blobLayout;
  }

  public RegistryOptions setBlobLayout(BlobLayout blobLayout) {
    this.blobLayout = blobLayout;
    return this;
  }

  /** Blob transfers in flight at once, for a push or a pull. */
  public int transfers() {
    return transfers;
  }

  public RegistryOptions setTransfers(int transfers) {
    this.transfers = positive(transfers, "transfers");
    return this;
  }

  public Duration connectTimeout() {
    return connectTimeout;
  }

  public RegistryOptions setConnectTimeout(Duration connectTimeout) {
    this.connectTimeout = connectTimeout;
    return this;
  }

  public Duration requestTimeout() {
    return requestTimeout;
  }

  /**
   * The longest one request may take, from its send until its response's body is read whole; a request that runs
   * past it counts as a lost connection (retried, up to {@link #maxAttempts()}).
   */
  public RegistryOptions setRequestTimeout(Duration requestTimeout) {
    this.requestTimeout = requestTimeout;
    return this;
  }

  public Duration readTimeout() {
    return readTimeout;
  }

  /**
   * The longest a registry may go silent: between bytes of a response's body, and, for a request that sends no
   * body, until its response's head. A registry that stops answering (a stopped process, a dead link behind a live
   * proxy) fails the request then, as a lost connection, instead of holding a pull forever.
   */
  public RegistryOptions setReadTimeout(Duration readTimeout) {
    if (readTimeout == null || readTimeout.isNegative() || readTimeout.isZero()) {
      throw new IllegalArgumentException("readTimeout must be positive, not " + readTimeout);
    }
    this.readTimeout = readTimeout;
    return this;
  }

  /** Registries ({@code host[:port]}) spoken to over plain HTTP; loopback ones always are. */
  public Set<String> plainHttp() {
    return Set.copyOf(plainHttp);
  }

  public RegistryOptions addPlainHttp(String registry) {
    plainHttp.add(registry);
    return this;
  }

  /** Repositories of the same registry a push tries to mount a missing blob from before uploading it. */
  public List<String> mountFrom() {
    return List.copyOf(mountFrom);
  }

  public RegistryOptions addMountFrom(String repository) {
    mountFrom.add(repository);
    return this;
  }

  public RegistryCredentials credentials() {
    return credentials;
  }

  public RegistryOptions setCredentials(RegistryCredentials credentials) {
    this.credentials = credentials;
    return this;
  }

  private static int positive(int value, String name) {
    if (value <= 0) {
      throw new IllegalArgumentException(name + " must be positive, not " + value);
    }
    return value;
  }

  /** Everything but the credentials (only where they came from). */
  public ObjectNode toJson() {
    ObjectNode n = new ObjectMapper().createObjectNode();
    n.put("maxAttempts", maxAttempts);
    n.put("initialBackoffMillis", initialBackoff.toMillis());
    n.put("maxBackoffMillis", maxBackoff.toMillis());
    n.put("maxRetryAfterMillis", maxRetryAfter.toMillis());
    n.put("monolithicLimit", monolithicLimit);
    n.put("uploadPartBytes", uploadPartBytes);
    n.put("maxManifestBytes", maxManifestBytes);
    n.put("packMinBytes", packMinBytes);
    n.put("packMaxBytes", packMaxBytes);
    n.put("blobLayout", blobLayout.name().toLowerCase(Locale.ROOT));
    n.put("transfers", transfers);
    n.put("connectTimeoutMillis", connectTimeout.toMillis());
    n.put("requestTimeoutMillis", requestTimeout.toMillis());
    n.put("readTimeoutMillis", readTimeout.toMillis());
    plainHttp.forEach(n.putArray("plainHttp")::add);
    mountFrom.forEach(n.putArray("mountFrom")::add);
    n.put("credentials", credentials.source());
    return n;
  }

  @Override
  public String toString() {
    return toJson().toString();
  }
}
