package dev.thaw.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.pool.ContextPoolOptions;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.function.Predicate;

/** Images built on the sim device into a real RocksDB store, and an HTTP client for a server on loopback. */
public final class ServerFixture {

  public static final ObjectMapper JSON = new ObjectMapper();
  public static final String MLP = "dev.thaw.examples.mlp.MlpFunction";
  public static final String GPT2 = "dev.thaw.examples.gpt2.Gpt2Function";
  public static final String MLP_CONFIG = "{\"layers\": [8, 16, 4], \"seed\": 3, \"maxBatch\": 8}";
  public static final String MLP_REQUEST = "{\"inputs\": [[1, 2, 3, 4, 5, 6, 7, 8]]}";

  private ServerFixture() {}

  public static RocksChunkStore openStore(Path dir) {
    return RocksChunkStore.open(new StoreOptions().setPath(dir));
  }

  /**
   * Builds an image on a fresh sim driver. {@code skipBytes} of device memory are taken first, so that this
   * image's addresses start above an earlier one's (images that share an address range cannot be resident
   * together in one process).
   */
  public static void build(ChunkStore store, String tag, String function, String config, String sample,
      long skipBytes) throws Exception {
    BuildOptions o = new BuildOptions().setFunctionClass(function).setConfig(config).setTag(tag);
    if (sample != null) {
      o.addSampleRequest(JSON.readTree(sample));
    }
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      DeviceBuffer skip = skipBytes > 0 ? ctx.allocate(skipBytes) : null;
      try {
        new ImageBuilder(store, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE);
      } finally {
        if (skip != null) {
          skip.close();
        }
      }
    }
  }

  public static void buildMlp(ChunkStore store, String tag) throws Exception {
    build(store, tag, MLP, MLP_CONFIG, MLP_REQUEST, 0);
  }

  public static final HttpClient CLIENT = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

  public static HttpResponse<String> send(HttpRequest r) throws Exception {
    return CLIENT.send(r, HttpResponse.BodyHandlers.ofString());
  }

  public static HttpRequest.Builder request(int port, String path) {
    return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).timeout(Duration.ofSeconds(60));
  }

  public static HttpResponse<String> get(int port, String path) throws Exception {
    return send(request(port, path).GET().build());
  }

  public static HttpResponse<String> postJson(int port, String path, String body) throws Exception {
    return send(request(port, path).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body)).build());
  }

  /** Runs {@code call} on a thread of its own. */
  public static <T> CompletableFuture<T> background(Callable<T> call) {
    CompletableFuture<T> f = new CompletableFuture<>();
    Thread t = new Thread(() -> {
      try {
        f.complete(call.call());
      } catch (Throwable e) {
        f.completeExceptionally(e);
      }
    }, "test-client");
    t.setDaemon(true);
    t.start();
    return f;
  }

  /**
   * A JSON object's text without its {@code requestId}, at the top or in OpenAI's {@code error} object (every response
   * has its own); anything else as it is.
   */
  public static String withoutRequestId(String body) {
    try {
      JsonNode n = JSON.readTree(body);
      if (n instanceof ObjectNode o && (o.has("requestId") || o.path("error").has("requestId"))) {
        o.remove("requestId");
        if (o.get("error") instanceof ObjectNode e) {
          e.remove("requestId");
        }
        return JSON.writeValueAsString(o);
      }
    } catch (IOException e) {
      // Not JSON: compared as it is.
    }
    return body;
  }

  public static JsonNode json(HttpResponse<String> r) throws Exception {
    return JSON.readTree(r.body());
  }

  /**
   * A pool of small sim-device workers (serial GC, 256 MiB heap, no warm-up launches) on {@code devices} (ordinals 0 to
   * n-1, as many simulated devices for them), mapping the host cache at {@code hostCache}.
   */
  public static ContextPoolOptions simPool(Path store, Path hostCache, List<Integer> devices) {
    return new ContextPoolOptions().setDevices(devices).setIdleTarget(1).setMaxWorkers(3)
        .setDeviceChoice("sim").setStorePath(store).setWarmupLaunches(0).setHostCachePath(hostCache)
        .setJvmOptions(List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"))
        .setEnvironment(Map.of("THAW_DEVICE", "sim", "THAW_SIM_DEVICES", String.valueOf(devices.size())));
  }

  /** Polls {@code GET /v1/functions/{function}} until {@code done} holds (30 s at most); returns that state. */
  public static JsonNode awaitState(int port, String function, Predicate<JsonNode> done)
      throws Exception {
    JsonNode s = null;
    for (int i = 0; i < 3000; i++) {
      s = json(get(port, "/v1/functions/" + function));
      if (done.test(s)) {
        return s;
      }
      Thread.sleep(10);
    }
    throw new AssertionError(function + " never reached the expected state: " + s);
  }

  /** Polls {@code /v2/health/ready} until it answers 200 (60 s at most). */
  public static void awaitReady(int port) throws Exception {
    for (int i = 0; i < 6000; i++) {
      if (get(port, "/v2/health/ready").statusCode() == 200) {
        return;
      }
      Thread.sleep(10);
    }
    throw new AssertionError("the server never became ready");
  }
}
