package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Thaw's server over HTTP: {@code thaw serve} (pool-backed instances) serving the image, and the request POSTed
 * to {@code /v1/functions/f/invoke}; the time is the client's, from sending the request to the whole response
 * in hand. Phases are the server's {@code Server-Timing} (queue, acquire, map, restore-wait, invoke) and what
 * HTTP and the server add to them.
 * <ul>
 *   <li>{@code thaw-server-cold}: keep-alive 0, so each request finds no instance and starts one (a pooled
 *       worker restoring the image on demand from the server's default tiers: the host cache, or the store while
 *       it stages the image, and from the second cold start the HBM tier, where the last instance left its
 *       weights); before each, the harness waits for the instance to be gone and the server's pool to have its
 *       idle workers back, ready ({@link #IDLE_WORKERS}, {@link #SETTLE}).
 *       {@code Thaw-Start} must say {@code cold}.
 *   <li>{@code thaw-server-warm}: a long keep-alive; after one cold request and one more, each request finds
 *       the instance warm. {@code Thaw-Start} must say {@code warm}.
 * </ul>
 * A server per model and contender, started after the model's image was built, stopped by SIGTERM after.
 * The cold contender keeps the server's Chrome trace of its cold starts ({@code traces/<model>.trace.json} in the
 * output folder) for the restore timeline.
 */
final class ThawServerContender implements Contender {

  static final String COLD_ID = "thaw-server-cold";
  static final String WARM_ID = "thaw-server-warm";
  /**
   * The server's pool keeps two idle workers, so a cold start finds one that finished its start long ago while
   * the replacement of the last one starts; the harness waits for both processes to be there, then this long.
   * The server tells no one when its pool is idle: {@code acquire} in the phases shows any wait for a worker.
   */
  static final int IDLE_WORKERS = 2;
  static final Duration SETTLE = Duration.ofMillis(1500);

  private final boolean cold;

  ThawServerContender(boolean cold) {
    this.cold = cold;
  }

  @Override
  public String id() {
    return cold ? COLD_ID : WARM_ID;
  }

  @Override
  public String label() {
    // Its default tiers: the first cold start from the host cache (or the store while the image is being staged),
    // the later ones from the HBM tier (the weights an evicted instance left on the GPU).
    return cold ? "Thaw server over HTTP, cold (its default tiers)" : "Thaw server over HTTP, warm";
  }

  @Override
  public boolean sweeps() {
    return cold;
  }

  @Override
  public Optional<String> unavailable(Bench bench) {
    return Optional.empty();
  }

  @Override
  public List<Sample> run(Bench bench, PreparedModel model, int runs) throws ContenderException, InterruptedException {
    String tag = model.requireTag();
    byte[] request = ThawPoolColdContender.readRequest(model);
    List<Sample> samples = new ArrayList<>();
    try (HarnessServer server = HarnessServer.start(bench, tag, cold ? "0s" : "600s", IDLE_WORKERS)) {
      if (!cold) {
        expect(server.invoke(request), "cold", server);
        expect(server.invoke(request), "warm", server);
      }
      for (int i = 0; i < runs; i++) {
        if (cold) {
          server.awaitCold(SETTLE);
        }
        HarnessServer.Answer a = server.invoke(request);
        expect(a, cold ? "cold" : "warm", server);
        Map<String, Double> phases = new LinkedHashMap<>(a.serverTiming());
        // Not phases: the function's own time is a part of invoke, and server spans them all.
        phases.remove("function");
        phases.remove("server");
        double inside = phases.values().stream().mapToDouble(Double::doubleValue).sum();
        phases.put("HTTP + server", Math.max(0, a.millis() - inside));
        samples.add(new Sample(a.millis(), phases,
            model.workload().answerOf(ColdStartResult.JSON.readTree(a.body())), null, null));
      }
      if (cold) {
        Path traces = Files.createDirectories(bench.out().resolve(ChromeTrace.FOLDER));
        Files.writeString(traces.resolve(model.workload().name() + ".trace.json"), server.trace());
      }
    } catch (IOException e) {
      throw new ContenderException(id() + ": " + e.getMessage(), e);
    }
    return samples;
  }

  private static void expect(HarnessServer.Answer a, String start, HarnessServer server) throws ContenderException {
    if (a.status() != 200) {
      throw new ContenderException("the server answered " + a.status() + ": " + Lines.abbreviate(a.body())
          + " | server: " + Lines.abbreviate(server.output()));
    }
    if (!a.start().equals(start)) {
      throw new ContenderException("the request was meant to be " + start + " but the server says Thaw-Start: "
          + a.start() + " (" + a.serverTiming() + ")");
    }
  }
}
