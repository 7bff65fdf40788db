package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.bench.server.ServerOverhead;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A {@code thaw serve} child process serving one image as one function, as a user runs it: pool-backed
 * instances, the store opened read-only (it was built before the server started), configured by a file.
 * Closed by SIGTERM, which drains it.
 */
final class HarnessServer implements AutoCloseable {

  static final String FUNCTION = "f";

  /**
   * One answer over HTTP.
   *
   * @param millis from sending the request to the whole body in hand
   * @param status the HTTP status
   * @param start {@code Thaw-Start}: cold or warm
   * @param serverTiming {@code Server-Timing}'s phases, in order, in milliseconds
   * @param body the response body
   */
  record Answer(double millis, int status, String start, Map<String, Double> serverTiming, String body) {}

  private final Process process;
  private final URI url;
  private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  private final StringBuilder output;
  private final int idleWorkers;

  private HarnessServer(Process process, URI url, int idleWorkers, StringBuilder output) {
    this.process = process;
    this.url = url;
    this.idleWorkers = idleWorkers;
    this.output = output;
  }

  /** Starts {@code thaw serve} with {@code tag} as {@link #FUNCTION}, kept alive {@code keepAlive} when idle. */
  static HarnessServer start(Bench bench, String tag, String keepAlive, int idleWorkers)
      throws Contender.ContenderException, InterruptedException {
    try {
      ObjectNode config = ColdStartResult.JSON.createObjectNode();
      config.put("host", "127.0.0.1").put("port", 0);
      config.putObject("functions").putObject(FUNCTION).put("image", tag).put("minInstances", 0)
          .put("maxInstances", 1).put("keepAlive", keepAlive);
      Path file = Files.createTempFile(bench.work(), "serve-", ".json");
      ColdStartResult.JSON.writeValue(file.toFile(), config);
      ServeChild c = ServeChild.start(bench.thaw().command("serve", "--config", file.toString(),
          "--read-only-store", "--idle-workers", Integer.toString(idleWorkers)), bench.thaw().environment(),
          bench.childTimeout());
      return new HarnessServer(c.process(), c.url(), idleWorkers, c.output());
    } catch (IOException e) {
      throw new Contender.ContenderException(e.getMessage(), e);
    }
  }

  /** POSTs {@code request} to the function's native invoke endpoint. */
  Answer invoke(byte[] request) throws Contender.ContenderException, InterruptedException {
    HttpRequest r = HttpRequest.newBuilder(url.resolve("/v1/functions/" + FUNCTION + "/invoke"))
        .header("Content-Type", "application/json").timeout(Duration.ofMinutes(3))
        .POST(HttpRequest.BodyPublishers.ofByteArray(request)).build();
    try {
      long t0 = System.nanoTime();
      HttpResponse<String> response = http.send(r, HttpResponse.BodyHandlers.ofString());
      double ms = (System.nanoTime() - t0) / 1e6;
      return new Answer(ms, response.statusCode(), response.headers().firstValue("Thaw-Start").orElse(""),
          serverTiming(response.headers().firstValue("Server-Timing").orElse("")), response.body());
    } catch (IOException e) {
      throw new Contender.ContenderException("POST " + r.uri() + ": " + e.getMessage(), e);
    }
  }

  /** {@code queue;dur=0.004, acquire;dur=1.2} as an ordered map. */
  static Map<String, Double> serverTiming(String header) {
    return ServerOverhead.serverTiming(header);
  }

  /**
   * Waits until the function has no instance (its keep-alive ran out) and the server's pool has its idle
   * workers back, ready ({@code thaw_pool_workers{state="idle"}} in {@code /metrics}: a worker process that is
   * alive may still be registering its host cache, seconds), then {@code settle} more for their warm-ups after
   * READY to end.
   */
  void awaitCold(Duration settle) throws Contender.ContenderException, InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(2);
    while (System.nanoTime() < deadline) {
      JsonNode state = get("/v1/functions/" + FUNCTION);
      if (state.path("instances").isArray() && state.path("instances").isEmpty() && idleWorkers() >= idleWorkers) {
        Thread.sleep(settle.toMillis());
        return;
      }
      Thread.sleep(50);
    }
    throw new Contender.ContenderException("the server kept an instance or did not refill its pool in 2 minutes");
  }

  /** The pool's ready idle workers, all devices, from the server's {@code /metrics}. */
  private double idleWorkers() throws Contender.ContenderException, InterruptedException {
    try {
      HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve("/metrics"))
          .timeout(Duration.ofSeconds(30)).GET().build(), HttpResponse.BodyHandlers.ofString());
      double idle = 0;
      for (String line : r.body().split("\n")) {
        if (line.startsWith("thaw_pool_workers{") && line.contains("state=\"idle\"")) {
          idle += Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
        }
      }
      return idle;
    } catch (IOException | NumberFormatException e) {
      throw new Contender.ContenderException("GET /metrics: " + e.getMessage(), e);
    }
  }

  JsonNode get(String path) throws Contender.ContenderException, InterruptedException {
    try {
      HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve(path)).timeout(Duration.ofSeconds(30))
          .GET().build(), HttpResponse.BodyHandlers.ofString());
      return ColdStartResult.JSON.readTree(r.body());
    } catch (IOException e) {
      throw new Contender.ContenderException("GET " + path + ": " + e.getMessage(), e);
    }
  }

  /** The server's Chrome trace of its recent cold starts. */
  String trace() throws Contender.ContenderException, InterruptedException {
    return get("/v1/functions/" + FUNCTION + "/trace").toString();
  }

  String output() {
    synchronized (output) {
      return output.toString();
    }
  }

  @Override
  public void close() throws InterruptedException {
    List<ProcessHandle> children = new ArrayList<>(process.descendants().toList());
    process.destroy(); // SIGTERM: the server drains and exits
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor();
    }
    children.forEach(ProcessHandle::destroyForcibly);
  }
}
