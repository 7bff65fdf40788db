package dev.thaw.server;

import static dev.thaw.server.ServerFixture.postJson;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import dev.thaw.server.impl.InProcessInstances;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The load trial: {@code wrk} at 64 connections for a few seconds against the MLP on loopback. Every response must
 * be a 200 (no socket errors, no timeouts), and a second run must leave threads, file descriptors, instances and
 * device memory where the first left them. Skips, saying why, when wrk cannot be installed.
 */
class ServerLoadTest {

  static final int CONNECTIONS = 64;
  static final int SECONDS = 3;

  @TempDir
  Path dir;

  record Run(long requests, int errors, double p50Ms, double p99Ms, String output) {}

  @Test
  void sixtyFourConnectionsGetOnly200sAndLeaveNothingBehind() throws Exception {
    String wrk = TestTools.require("wrk");
    Path script = dir.resolve("invoke.lua");
    Files.writeString(script, String.join("\n",
        "wrk.method = \"POST\"",
        "wrk.headers[\"Content-Type\"] = \"application/json\"",
        "wrk.body = '" + ServerFixture.MLP_REQUEST + "'",
        "local bad = 0",
        "function response(status, headers, body) if status ~= 200 then bad = bad + 1 end end",
        "function done(summary, latency, requests)",
        "  local e = summary.errors",
        "  io.write(string.format(\"RESULT requests=%d errors=%d p50=%d p99=%d\\n\", summary.requests,",
        "    e.connect + e.read + e.write + e.status + e.timeout, latency:percentile(50), latency:percentile(99)))",
        "end", ""));
    try (RocksChunkStore store = ServerFixture.openStore(dir.resolve("store"));
        SimDriver driver = SimDriver.open(new SimOptions())) {
      ServerFixture.buildMlp(store, "mlp:1");
      try (ThawServer server = ThawServer.start(new ServerOptions().setPort(0)
          .addFunction("mlp", new FunctionOptions().setImage("mlp:1").setQueueCapacity(4 * CONNECTIONS)),
          store, new InProcessInstances(driver, store))) {
        String url = server.url() + "/v1/functions/mlp/invoke";
        assertEquals(200, postJson(server.port(), "/v1/functions/mlp/invoke", ServerFixture.MLP_REQUEST).statusCode());
        Run first = load(wrk, script, url);
        int threads = settledThreads();
        long fds = settledFds();
        long memory = driver.memoryInUse();

        Run second = load(wrk, script, url);
        for (Run r : List.of(first, second)) {
          System.out.printf("wrk -c%d -d%ds: %d requests, %d errors, p50 %.2f ms, p99 %.2f ms (sim device)%n",
              CONNECTIONS, SECONDS, r.requests(), r.errors(), r.p50Ms(), r.p99Ms());
          assertTrue(r.requests() > 0, r.output());
          assertEquals(0, r.errors(), "every response a 200: " + r.output());
        }
        // Nothing left behind: no more threads than after the first run (fewer is fine: a pool's idle threads time out).
        int after = settledThreads();
        assertTrue(after <= threads, "threads after a second run: " + after + ", after the first: " + threads);
        assertEquals(fds, settledFds(), "file descriptors after a second run");
        assertEquals(1, server.instanceCount(), "one instance served it all");
        assertEquals(memory, driver.memoryInUse(), "device memory after a second run");
      }
      assertEquals(0, driver.memoryInUse(), "nothing left on the device after close");
    }
  }

  private static Run load(String wrk, Path script, String url) throws Exception {
    Process p = new ProcessBuilder(wrk, "-t2", "-c" + CONNECTIONS, "-d" + SECONDS + "s", "--timeout", "20s", "-s",
        script.toString(), url).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(SECONDS + 60L, TimeUnit.SECONDS), "wrk finished");
    assertEquals(0, p.exitValue(), out);
    Matcher m = Pattern.compile("RESULT requests=(\\d+) errors=(\\d+) p50=(\\d+) p99=(\\d+)").matcher(out);
    assertTrue(m.find(), out);
    return new Run(Long.parseLong(m.group(1)), Integer.parseInt(m.group(2)), Long.parseLong(m.group(3)) / 1e3,
        Long.parseLong(m.group(4)) / 1e3, out);
  }

  /** The thread count once it stops changing (connections close and handlers finish after the last response). */
  private static int settledThreads() throws InterruptedException {
    int last = -1;
    for (int i = 0; i < 50; i++) {
      int now = ManagementFactory.getThreadMXBean().getThreadCount();
      if (now == last) {
        return now;
      }
      last = now;
      Thread.sleep(100);
    }
    return last;
  }

  private static long settledFds() throws IOException, InterruptedException {
    long last = -1;
    int stable = 0;
    for (int i = 0; i < 100 && stable < 3; i++) {
      long now;
      try (Stream<Path> s = Files.list(Path.of("/proc/self/fd"))) {
        now = s.count();
      }
      stable = now == last ? stable + 1 : 0;
      last = now;
      Thread.sleep(100);
    }
    return last;
  }
}
