package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code thaw serve} child for the node trace: started with the node's options and no function, then given its
 * functions through the admin API, the way a platform registers them; closed by SIGTERM.
 */
final class NodeServer implements AutoCloseable {

  /**
   * One request as the client saw it.
   *
   * @param sentNanos when it was sent, on the client's clock
   * @param millis from sending it to the whole body in hand
   * @param tier the cold start's tier from {@code Server-Timing} ({@code hbm}, {@code host-cache}, {@code store}),
   *     or empty
   */
  record Answer(long sentNanos, double millis, int status, String start, String tier, String body) {}

  private final Process process;
  private final URI url;
  private final String token;
  private final HttpClient http;
  private final StringBuilder output;

  private NodeServer(Process process, URI url, String token, StringBuilder output) {
    this.process = process;
    this.url = url;
    this.token = token;
    this.output = output;
    this.http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).version(HttpClient.Version.HTTP_1_1)
        .build();
  }

  /** Starts {@code thaw serve} with {@code options} (flags) on a free loopback port. */
  static NodeServer start(ThawCommand thaw, List<String> options, String token, Duration timeout)
      throws IOException, InterruptedException {
    List<String> args = new ArrayList<>(List.of("serve", "--host", "127.0.0.1", "--port", "0", "--read-only-store"));
    args.addAll(options);
    Map<String, String> env = new HashMap<>(thaw.environment());
    env.put("THAW_ADMIN_TOKEN", token);
    ServeChild c = ServeChild.start(thaw.command(args.toArray(String[]::new)), env, timeout);
    return new NodeServer(c.process(), c.url(), token, c.output());
  }

  /** Registers {@code name} serving {@code image}, scaled to zero after {@code keepAlive} idle. */
  void register(String name, String image, String keepAlive) throws IOException, InterruptedException {
    String body = "{\"image\": \"" + image + "\", \"minInstances\": 0, \"maxInstances\": 2, \"keepAlive\": \""
        + keepAlive + "\"}";
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve("/v1/functions/" + name))
        .header("Authorization", "Bearer " + token).header("Content-Type", "application/json")
        .timeout(Duration.ofSeconds(60)).PUT(HttpRequest.BodyPublishers.ofString(body)).build(),
        HttpResponse.BodyHandlers.ofString());
    if (r.statusCode() / 100 != 2) {
      throw new IOException("PUT /v1/functions/" + name + ": " + r.statusCode() + " " + r.body());
    }
  }

  /** Invokes {@code name} asynchronously; the answer completes the future (an I/O failure: status 0). */
  CompletableFuture<Answer> invoke(String name, byte[] request) {
    HttpRequest r = HttpRequest.newBuilder(url.resolve("/v1/functions/" + name + "/invoke"))
        .header("Content-Type", "application/json").timeout(Duration.ofMinutes(3))
        .POST(HttpRequest.BodyPublishers.ofByteArray(request)).build();
    long t0 = System.nanoTime();
    return http.sendAsync(r, HttpResponse.BodyHandlers.ofString()).handle((response, e) -> {
      double ms = (System.nanoTime() - t0) / 1e6;
      if (e != null) {
        return new Answer(t0, ms, 0, "", "", String.valueOf(e));
      }
      return new Answer(t0, ms, response.statusCode(), response.headers().firstValue("Thaw-Start").orElse(""),
          tier(response.headers().firstValue("Server-Timing").orElse("")), response.body());
    });
  }

  /** {@code tier;desc="host-cache"} in a Server-Timing header. */
  static String tier(String serverTiming) {
    Matcher m = Pattern.compile("tier;desc=\"([^\"]*)\"").matcher(serverTiming);
    return m.find() ? m.group(1) : "";
  }

  JsonNode get(String path) throws IOException, InterruptedException {
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve(path)).timeout(Duration.ofSeconds(60))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    return ColdStartResult.JSON.readTree(r.body());
  }

  /**
   * The server's {@code /metrics} as series → value (labels in the key as written), counters and gauges only: what
   * the report takes differences of.
   */
  Map<String, Double> metrics() throws IOException, InterruptedException {
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve("/metrics")).timeout(Duration.ofSeconds(60))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    Map<String, Double> m = new HashMap<>();
    for (String line : r.body().split("\n")) {
      if (line.isEmpty() || line.startsWith("#")) {
        continue;
      }
      int space = line.lastIndexOf(' ');
      try {
        m.put(line.substring(0, space), Double.parseDouble(line.substring(space + 1)));
      } catch (NumberFormatException | StringIndexOutOfBoundsException e) {
        // Not a sample line.
      }
    }
    return m;
  }

  /** The sum of every series of {@code name} whose labels contain each of {@code labels} ({@code k="v"}). */
  static double sum(Map<String, Double> metrics, String name, String... labels) {
    double s = 0;
    for (Map.Entry<String, Double> e : metrics.entrySet()) {
      String k = e.getKey();
      if (!(k.equals(name) || k.startsWith(name + "{"))) {
        continue;
      }
      boolean all = true;
      for (String l : labels) {
        all &= k.contains(l);
      }
      if (all) {
        s += e.getValue();
      }
    }
    return s;
  }

  /** Waits until the pool has at least {@code idle} ready idle workers (all devices). */
  void awaitIdleWorkers(int idle, Duration timeout) throws IOException, InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (sum(metrics(), "thaw_pool_workers", "state=\"idle\"") < idle) {
      if (System.nanoTime() > deadline) {
        throw new IOException("the pool did not get " + idle + " idle workers back in " + timeout);
      }
      Thread.sleep(50);
    }
  }

  /** Waits until {@code name} has no instance (its keep-alive ran out). */
  void awaitScaledToZero(String name, Duration timeout) throws IOException, InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!get("/v1/functions/" + name).path("instances").isEmpty()) {
      if (System.nanoTime() > deadline) {
        throw new IOException(name + " kept an instance past " + timeout);
      }
      Thread.sleep(50);
    }
  }

  String output() {
    synchronized (output) {
      return output.toString();
    }
  }

  @Override
  public void close() throws InterruptedException {
    List<ProcessHandle> children = new ArrayList<>(process.descendants().toList());
    process.destroy();
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor();
    }
    children.forEach(ProcessHandle::destroyForcibly);
  }
}
