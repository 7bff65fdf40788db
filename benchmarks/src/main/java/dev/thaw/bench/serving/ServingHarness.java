package dev.thaw.bench.serving;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Measures a language model served by {@code thaw serve} as OpenAI's streaming clients see it (the GPU half of
 * {@code scripts/gpu/serving-run.sh}), one phase per run, each writing {@code <out>/<phase>.json} and a
 * {@code SUMMARY} line:
 * <pre>
 * java -cp 'thaw/lib/*:thaw/lib/bench/*' dev.thaw.bench.serving.ServingHarness PHASE --url http://127.0.0.1:8080
 *     --model llama [--prompt-tokens 32] [--tokens 256] [--streams 32] [--runs 3] [--vocab 128000] --out DIR
 *   baseline      the function's own prompt pass with its head (a native invoke of 1 new token) and its warm decode
 *                 step ((1 + 64 tokens) − (1 token)) / 64), from Server-Timing's function time, medians of --runs
 *   single        --runs streamed completions alone: time to first token, inter-token latency (median, p99)
 *   load          --streams streamed completions at once, --tokens each: tokens/s, time to first token and
 *                 inter-token latency (p50, p99), failures
 *   cold          the function registered again (PUT, THAW_ADMIN_TOKEN; --image), so its next request starts an
 *                 instance: one streamed completion alone; registered again, --streams at once: the first token of
 *                 the first of them against the single one's
 *   coldttft      the cold time to first token from one tier (--tier hbm|host-cache; --image): --runs rounds, each
 *                 the function registered again (scaled to zero) until its image waits in that tier and a worker is
 *                 idle, then --settle-ms (3000: a worker started after the scale-in finishes its warm-up and
 *                 PREPARE, as on a node idle a while), then one streamed completion of --tokens; per round the client's time to the first token, the
 *                 tier the instance's bytes came from and its start phases (acquire, map, restore-wait) as the
 *                 function's state reports them; then one cold native invoke with its Server-Timing; beside them the
 *                 warm time to first token and the function's own time for the same request (medians of 3); writes
 *                 coldttft-TIER.json, exit status 1 when a round failed or started from another tier
 *   report        the goals against what the phases (and the PyTorch side's torch.json) wrote
 * </pre>
 * Prompts are random token ids below {@code --vocab} (the model's tokenizer decodes every id it may draw), greedy, no stop: every completion
 * runs to {@code --tokens}. Exit status 0 when the phase ran without a failed request (report: always 0 once the
 * files read), 1 when one failed, 2 when it could not run.
 */
public final class ServingHarness {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Pattern TIMING = Pattern.compile("([A-Za-z0-9_-]+);dur=([0-9.]+)");
  private static final Pattern TIMING_TIER = Pattern.compile("tier;desc=\"([^\"]*)\"");
  /** The tiers {@code coldttft} measures from, as the server names a cold start's source (a prefix of it). */
  static final List<String> TIERS = List.of("hbm", "host-cache");
  private static final int WARM_RUNS = 3;
  private static final Pattern IDLE = Pattern.compile("(?m)^thaw_pool_workers\\{[^}]*state=\"idle\"[^}]*\\} ([0-9.eE+-]+)");

  private final URI url;
  private final String model;
  private final int promptTokens;
  private final int tokens;
  private final int streams;
  private final int runs;
  /** coldttft: how long the node is left idle after a scale-to-zero before the cold request. */
  private long settleMillis = 3000;
  private final int vocab;
  private final String image;
  private final String tier;
  private final Path out;
  private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10))
      .version(HttpClient.Version.HTTP_1_1).build();

  private ServingHarness(URI url, String model, int promptTokens, int tokens, int streams, int runs, int vocab,
      String image, String tier, Path out) {
    this.url = url;
    this.model = model;
    this.promptTokens = promptTokens;
    this.tokens = tokens;
    this.streams = streams;
    this.runs = runs;
    this.vocab = vocab;
    this.image = image;
    this.tier = tier;
    this.out = out;
  }

  public static void main(String[] args) {
    try {
      System.exit(run(args));
    } catch (Exception e) {
      System.err.println("ServingHarness failed: " + e);
      e.printStackTrace();
      System.exit(2);
    }
  }

  static int run(String[] args) throws Exception {
    if (args.length == 0) {
      System.err.println("usage: ServingHarness baseline|single|load|cold|coldttft|report --url URL --model NAME "
          + "--out DIR [--prompt-tokens 32] [--tokens 256] [--streams 32] [--runs 3] [--vocab 128000] [--image TAG] "
          + "[--tier hbm|host-cache]");
      return 2;
    }
    String phase = args[0];
    String url = "http://127.0.0.1:8080";
    String model = "llama";
    String image = null;
    String tier = null;
    Path out = Path.of(".");
    int promptTokens = 32;
    int tokens = 256;
    int streams = 32;
    int runs = 3;
    int vocab = 128_000;
    long settle = 3000;
    for (int i = 1; i < args.length; i += 2) {
      if (i + 1 >= args.length) {
        System.err.println(args[i] + " needs a value");
        return 2;
      }
      String v = args[i + 1];
      try {
        switch (args[i]) {
          case "--url" -> url = v;
          case "--model" -> model = v;
          case "--image" -> image = v;
          case "--tier" -> tier = v;
          case "--out" -> out = Path.of(v);
          case "--prompt-tokens" -> promptTokens = positive(args[i], v);
          case "--tokens" -> tokens = positive(args[i], v);
          case "--streams" -> streams = positive(args[i], v);
          case "--runs" -> runs = positive(args[i], v);
          case "--settle-ms" -> settle = positive(args[i], v);
          case "--vocab" -> vocab = positive(args[i], v);
          default -> {
            System.err.println("unknown argument " + args[i]);
            return 2;
          }
        }
      } catch (IllegalArgumentException e) {
        System.err.println(e.getMessage());
        return 2;
      }
    }
    if (phase.equals("coldttft") && (image == null || tier == null || !TIERS.contains(tier))) {
      System.err.println("coldttft needs --image (the tag the function serves) and --tier, one of " + TIERS
          + (tier == null ? "" : ", not " + tier));
      return 2;
    }
    Files.createDirectories(out);
    ServingHarness h = new ServingHarness(URI.create(url), model, promptTokens, tokens, streams, runs, vocab, image,
        tier, out);
    h.settleMillis = settle;
    return switch (phase) {
      case "baseline" -> h.baseline();
      case "single" -> h.single();
      case "load" -> h.load();
      case "cold" -> h.cold();
      case "coldttft" -> h.coldTtft();
      case "report" -> h.report();
      default -> {
        System.err.println("unknown phase " + phase);
        yield 2;
      }
    };
  }

  // ---- phases ----

  /** The function's own prompt pass and decode step, as the server's Server-Timing reports its time. */
  private int baseline() throws Exception {
    int decode = Math.min(64, tokens);
    int[] prompt = prompt(0);
    functionMillis(prompt, 1);
    functionMillis(prompt, 1 + decode);
    List<Double> prefill = new ArrayList<>();
    List<Double> full = new ArrayList<>();
    for (int r = 0; r < Math.max(3, runs); r++) {
      prefill.add(functionMillis(prompt, 1));
      full.add(functionMillis(prompt, 1 + decode));
    }
    double prefillMs = median(prefill);
    double stepMs = (median(full) - prefillMs) / decode;
    ObjectNode o = JSON.createObjectNode().put("promptTokens", promptTokens).put("prefillMs", prefillMs)
        .put("decodeStepMs", stepMs).put("decodeTokens", decode);
    write("baseline", o);
    System.out.printf(Locale.ROOT, "SUMMARY baseline: prompt pass of %d tokens with its head %.2f ms; warm decode step "
        + "%.3f ms (medians of %d, the function's own time)%n", promptTokens, prefillMs, stepMs, prefill.size());
    return 0;
  }

  /** Streamed completions alone, one after another (the first a warm-up, not counted). */
  private int single() throws Exception {
    stream(prompt(99));
    List<Double> ttft = new ArrayList<>();
    List<Double> gaps = new ArrayList<>();
    int failed = 0;
    for (int r = 0; r < runs; r++) {
      SseStream.Seen s = stream(prompt(r));
      if (s.error() != null) {
        failed++;
        System.out.println("failed: " + s.error());
        continue;
      }
      ttft.add(s.ttftMillis());
      gaps.addAll(s.gapsMillis());
    }
    ObjectNode o = JSON.createObjectNode().put("runs", runs).put("failed", failed)
        .put("ttftMs", median(ttft)).put("itlMs", median(gaps)).put("itlP99Ms", percentile(gaps, 99))
        .put("tokensPerS", 1000 / median(gaps));
    write("single", o);
    System.out.printf(Locale.ROOT, "SUMMARY single stream: time to first token %.2f ms (median of %d); inter-token "
        + "%.3f ms median, %.3f ms p99 (%.0f tokens/s); %d failed%n", median(ttft), ttft.size(), median(gaps),
        percentile(gaps, 99), 1000 / median(gaps), failed);
    return failed == 0 ? 0 : 1;
  }

  /** {@code streams} streamed completions at once. */
  private int load() throws Exception {
    List<SseStream.Seen> seen = burst(streams, 1000);
    ObjectNode o = loadStats(seen);
    write("load-" + streams, o);
    System.out.printf(Locale.ROOT, "SUMMARY %d streams of %d tokens: %.0f tokens/s; time to first token p50 %.1f ms, "
        + "p99 %.1f ms; inter-token p50 %.3f ms, p99 %.3f ms; %d failed%n", streams, tokens,
        o.get("tokensPerS").asDouble(), o.get("ttftP50Ms").asDouble(), o.get("ttftP99Ms").asDouble(),
        o.get("itlP50Ms").asDouble(), o.get("itlP99Ms").asDouble(), o.get("failed").asInt());
    return o.get("failed").asInt() == 0 ? 0 : 1;
  }

  /** A cold start alone, then a cold start under {@code streams} simultaneous requests. */
  private int cold() throws Exception {
    if (image == null) {
      System.err.println("cold needs --image (the tag the function serves)");
      return 2;
    }
    reregister();
    SseStream.Seen alone = stream(prompt(500));
    reregister();
    List<SseStream.Seen> burst = burst(streams, 2000);
    double first = Double.NaN;
    int failed = alone.error() == null ? 0 : 1;
    List<Double> ttft = new ArrayList<>();
    for (SseStream.Seen s : burst) {
      if (s.error() != null) {
        failed++;
        continue;
      }
      ttft.add(s.ttftMillis());
      first = Double.isNaN(first) ? s.ttftMillis() : Math.min(first, s.ttftMillis());
    }
    JsonNode state = getJson("/v1/functions/" + model);
    ObjectNode o = JSON.createObjectNode().put("coldAloneTtftMs", alone.ttftMillis())
        .put("coldBurstFirstTtftMs", first).put("coldBurstTtftP50Ms", median(ttft))
        .put("coldBurstTtftMaxMs", ttft.isEmpty() ? Double.NaN : (double) Collections.max(ttft)).put("streams", streams)
        .put("failed", failed).put("instances", state.path("instances").size());
    if (alone.error() != null) {
      o.put("aloneError", alone.error());
    }
    write("cold", o);
    System.out.printf(Locale.ROOT, "SUMMARY cold start: alone, first token %.1f ms; %d at once, the first's %.1f ms "
        + "(%.3f x alone), median %.1f ms, last %.1f ms; %d instance(s); %d failed%n", alone.ttftMillis(), streams,
        first, first / alone.ttftMillis(), median(ttft), o.get("coldBurstTtftMaxMs").asDouble(),
        o.get("instances").asInt(), failed);
    return failed == 0 ? 0 : 1;
  }

  /**
   * The cold time to first token from {@link #tier}: the instance started once (the image lands in the tiers), the
   * warm references, {@link #runs} streamed cold rounds, then one cold native invoke for its {@code Server-Timing}
   * (a stream's headers leave with its first token, before the server knows its phases).
   */
  private int coldTtft() throws Exception {
    SseStream.Seen first = stream(prompt(700));
    if (first.error() != null) {
      System.out.println("the first request failed: " + first.error());
      return 1;
    }
    System.out.printf(Locale.ROOT, "first start (not counted): first token %.1f ms, from %s%n",
        first.firstChoiceMillis(), servedBy().path("tier").asText("?"));
    int failed = 0;
    List<Double> warmTtft = new ArrayList<>();
    List<Double> warmFunction = new ArrayList<>();
    for (int r = 0; r < WARM_RUNS; r++) {
      SseStream.Seen s = stream(prompt(710 + r));
      if (s.error() != null) {
        failed++;
        System.out.println("warm request failed: " + s.error());
      } else {
        warmTtft.add(s.firstChoiceMillis());
      }
      warmFunction.add(nativeInvoke(prompt(720 + r), tokens).timing().getOrDefault("function", Double.NaN));
    }
    ArrayNode rounds = JSON.createArrayNode();
    List<Double> ttft = new ArrayList<>();
    List<Double> startMs = new ArrayList<>();
    List<Double> restoreWait = new ArrayList<>();
    int elsewhere = 0;
    String stopped = null;
    for (int r = 0; r < runs && stopped == null; r++) {
      double readyMs;
      try {
        readyMs = reregister(tier);
      } catch (IOException e) {
        // The tier never got the image (or the server went): no later round would either.
        stopped = e.getMessage();
        rounds.addObject().put("round", r + 1).put("error", stopped);
        failed++;
        System.out.printf(Locale.ROOT, "round %d: not started: %s%n", r + 1, stopped);
        break;
      }
      Thread.sleep(settleMillis);
      SseStream.Seen s = stream(prompt(800 + r));
      JsonNode inst = servedBy();
      JsonNode start = inst.path("startMillis");
      String from = inst.path("tier").asText("");
      double acquire = start.path("acquire").asDouble(Double.NaN);
      double map = start.path("map").asDouble(Double.NaN);
      double wait = start.path("restore-wait").asDouble(Double.NaN);
      ObjectNode row = rounds.addObject().put("round", r + 1).put("ttftMs", s.firstChoiceMillis()).put("tier", from)
          .put("acquireMs", acquire).put("mapMs", map).put("restoreWaitMs", wait)
          .put("startMs", acquire + map + wait).put("readyAfterMs", readyMs);
      if (s.error() != null) {
        row.put("error", s.error());
        failed++;
        System.out.printf(Locale.ROOT, "round %d: failed: %s%n", r + 1, s.error());
        continue;
      }
      if (!from.startsWith(tier)) {
        elsewhere++;
      }
      ttft.add(s.firstChoiceMillis());
      startMs.add(acquire + map + wait);
      restoreWait.add(wait);
      System.out.printf(Locale.ROOT, "round %d: first token %.2f ms; from %s: acquire %.2f, map %.2f, restore-wait "
          + "%.2f ms (ready for it %.0f ms after the registration)%n", r + 1, s.firstChoiceMillis(), from, acquire, map,
          wait, readyMs);
    }
    Timed cold = new Timed(Double.NaN, Map.of(), null);
    ObjectNode coldNative = JSON.createObjectNode();
    if (stopped == null) {
      try {
        reregister(tier);
        cold = nativeInvoke(prompt(900), tokens);
        coldNative.put("clientMs", cold.clientMillis()).put("tier", cold.tier());
        ObjectNode timing = coldNative.putObject("serverTiming");
        cold.timing().forEach(timing::put);
        System.out.printf(Locale.ROOT, "cold native invoke: %.2f ms at the client; Server-Timing %s, from %s%n",
            cold.clientMillis(), cold.timing(), cold.tier());
        if (cold.tier() == null || !cold.tier().startsWith(tier)) {
          elsewhere++;
        }
      } catch (IOException e) {
        coldNative.put("error", e.getMessage());
        failed++;
        System.out.println("cold native invoke failed: " + e.getMessage());
      }
    }
    double goal = tier.equals("hbm") ? 100 : 360;
    ObjectNode o = JSON.createObjectNode().put("tier", tier).put("settleMs", settleMillis)
        .put("promptTokens", promptTokens)
        .put("newTokens", tokens).put("rounds", runs).put("failed", failed).put("fromAnotherTier", elsewhere);
    o.set("ttftMs", stats(ttft));
    o.set("startMs", stats(startMs));
    o.set("restoreWaitMs", stats(restoreWait));
    o.set("warmTtftMs", stats(warmTtft));
    o.set("warmFunctionMs", stats(warmFunction));
    o.put("firstStartTtftMs", first.firstChoiceMillis());
    o.set("samples", rounds);
    o.set("coldNative", coldNative);
    if (promptTokens == 2000) {
      o.put("goalMs", goal);
    }
    write("coldttft-" + tier, o);
    System.out.printf(Locale.ROOT, "SUMMARY cold time to first token from %s, %d-token prompt, %d new: median %.1f ms "
        + "(%.1f-%.1f, %d rounds)%s; the start (acquire + map + restore-wait) median %.1f ms, restore-wait %.1f ms; "
        + "warm %.1f ms (the function's own %.1f ms); cold native invoke %.1f ms (function %.1f ms); %d failed, %d "
        + "from another tier%n", tier, promptTokens, tokens, median(ttft), min(ttft), max(ttft), ttft.size(),
        promptTokens == 2000 ? String.format(Locale.ROOT, " (goal <= %.0f ms: %s)", goal,
            median(ttft) <= goal ? "met" : "missed") : "", median(startMs), median(restoreWait), median(warmTtft),
        median(warmFunction), cold.clientMillis(), cold.timing().getOrDefault("function", Double.NaN), failed,
        elsewhere);
    return failed == 0 && elsewhere == 0 ? 0 : 1;
  }

  /** Every goal against what the phases measured. */
  private int report() throws IOException {
    JsonNode base = read("baseline");
    JsonNode single = read("single");
    JsonNode l32 = read("load-32");
    JsonNode l64 = read("load-64");
    JsonNode cold = read("cold");
    JsonNode torch = read("torch");
    List<String> lines = new ArrayList<>();
    if (base != null && single != null) {
      double over = single.get("ttftMs").asDouble() - base.get("prefillMs").asDouble();
      lines.add(goal(over <= 2, "time to first token %.2f ms = prompt pass %.2f ms + %.2f ms (goal: + <= 2 ms)",
          single.get("ttftMs").asDouble(), base.get("prefillMs").asDouble(), over));
      double ratio = single.get("itlMs").asDouble() / base.get("decodeStepMs").asDouble();
      lines.add(goal(ratio <= 1.1, "one stream's inter-token %.3f ms = %.3f x the warm decode step %.3f ms "
          + "(goal: <= 1.1 x)", single.get("itlMs").asDouble(), ratio, base.get("decodeStepMs").asDouble()));
    }
    if (single != null && l32 != null) {
      double speedup = l32.get("tokensPerS").asDouble() / single.get("tokensPerS").asDouble();
      double p99 = l32.get("itlP99Ms").asDouble() / single.get("itlP99Ms").asDouble();
      lines.add(goal(speedup >= 20, "32 streams: %.0f tokens/s = %.1f x one stream's %.0f (goal: >= 20 x)",
          l32.get("tokensPerS").asDouble(), speedup, single.get("tokensPerS").asDouble()));
      lines.add(goal(p99 <= 2, "32 streams: inter-token p99 %.3f ms = %.2f x one stream's %.3f ms (goal: <= 2 x)",
          l32.get("itlP99Ms").asDouble(), p99, single.get("itlP99Ms").asDouble()));
    }
    if (l64 != null) {
      lines.add(goal(l64.get("failed").asInt() == 0, "64 streams: %d failed of 64, %.0f tokens/s (goal: none fails)",
          l64.get("failed").asInt(), l64.get("tokensPerS").asDouble()));
    }
    if (torch != null && l32 != null) {
      lines.add(String.format(Locale.ROOT, "against PyTorch generate (sdpa, bf16) in this run: 32 x %d tokens %.0f "
          + "tokens/s (Thaw %.1f x), one stream %.0f tokens/s (Thaw %.1f x)", torch.get("tokens").asInt(),
          torch.get("batched_tokens_per_s").asDouble(), l32.get("tokensPerS").asDouble()
          / torch.get("batched_tokens_per_s").asDouble(), torch.get("alone_tokens_per_s").asDouble(),
          single == null ? Double.NaN : single.get("tokensPerS").asDouble()
          / torch.get("alone_tokens_per_s").asDouble()));
    }
    if (cold != null) {
      double ratio = cold.get("coldBurstFirstTtftMs").asDouble() / cold.get("coldAloneTtftMs").asDouble();
      lines.add(goal(ratio <= 1.1, "cold start under load: the first of %d gets its first token in %.1f ms = %.3f x "
          + "a cold request alone (%.1f ms) (goal: <= 1.1 x)", cold.get("streams").asInt(),
          cold.get("coldBurstFirstTtftMs").asDouble(), ratio, cold.get("coldAloneTtftMs").asDouble()));
    }
    lines.forEach(l -> System.out.println("SUMMARY " + l));
    Files.write(out.resolve("goals.txt"), lines);
    return 0;
  }

  private static String goal(boolean met, String format, Object... args) {
    return (met ? "[met]    " : "[missed] ") + String.format(Locale.ROOT, format, args);
  }

  // ---- requests ----

  /** A prompt of random ids below the regular vocabulary, seeded by {@code seed}. */
  private int[] prompt(int seed) {
    Random r = new Random(1000L + seed);
    int[] p = new int[promptTokens];
    for (int i = 0; i < p.length; i++) {
      p[i] = r.nextInt(vocab);
    }
    return p;
  }

  private SseStream.Seen stream(int[] prompt) {
    ObjectNode body = JSON.createObjectNode().put("model", model).put("max_tokens", tokens).put("temperature", 0)
        .put("stream", true);
    body.putObject("stream_options").put("include_usage", true);
    ArrayNode ids = body.putArray("prompt");
    for (int id : prompt) {
      ids.add(id);
    }
    return SseStream.post(url.getHost(), url.getPort(), "/v1/completions", body.toString());
  }

  /** {@code n} streams released together (a latch), each on a thread of its own. */
  private List<SseStream.Seen> burst(int n, int seedBase) throws Exception {
    ExecutorService threads = Executors.newFixedThreadPool(n);
    try {
      CountDownLatch go = new CountDownLatch(1);
      List<Future<SseStream.Seen>> all = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int[] p = prompt(seedBase + i);
        all.add(threads.submit(() -> {
          go.await();
          return stream(p);
        }));
      }
      go.countDown();
      List<SseStream.Seen> seen = new ArrayList<>();
      for (Future<SseStream.Seen> f : all) {
        seen.add(f.get());
      }
      return seen;
    } finally {
      threads.shutdownNow();
    }
  }

  private ObjectNode loadStats(List<SseStream.Seen> seen) {
    List<Double> ttft = new ArrayList<>();
    List<Double> gaps = new ArrayList<>();
    long start = Long.MAX_VALUE;
    long end = Long.MIN_VALUE;
    long generated = 0;
    int failed = 0;
    for (SseStream.Seen s : seen) {
      if (s.error() != null) {
        failed++;
        System.out.println("failed: " + s.error());
        continue;
      }
      ttft.add(s.ttftMillis());
      gaps.addAll(s.gapsMillis());
      start = Math.min(start, s.sentNanos());
      end = Math.max(end, s.endNanos());
      generated += Math.max(0, s.completionTokens());
    }
    double seconds = (end - start) / 1e9;
    return JSON.createObjectNode().put("streams", seen.size()).put("failed", failed).put("tokens", generated)
        .put("seconds", seconds).put("tokensPerS", generated / seconds).put("ttftP50Ms", median(ttft))
        .put("ttftP99Ms", percentile(ttft, 99)).put("itlP50Ms", median(gaps)).put("itlP99Ms", percentile(gaps, 99));
  }

  /** The function's own time (Server-Timing {@code function}) for a native invoke of {@code newTokens}. */
  private double functionMillis(int[] prompt, int newTokens) throws Exception {
    Double function = nativeInvoke(prompt, newTokens).timing().get("function");
    if (function == null) {
      throw new IOException("no function time in Server-Timing");
    }
    return function;
  }

  /**
   * A native invoke's answer as timed.
   *
   * @param clientMillis from the request's send to its whole response, at the client
   * @param timing Server-Timing's entries by name, in milliseconds
   * @param tier a cold start's tier ({@code tier;desc}), null for a warm request
   */
  record Timed(double clientMillis, Map<String, Double> timing, String tier) {}

  /** A native invoke of {@code newTokens} after {@code prompt}, with its Server-Timing. */
  private Timed nativeInvoke(int[] prompt, int newTokens) throws Exception {
    ObjectNode body = JSON.createObjectNode().put("maxNewTokens", newTokens);
    ArrayNode row = body.putArray("tokens").addArray();
    for (int id : prompt) {
      row.add(id);
    }
    long sent = System.nanoTime();
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve("/v1/functions/" + model + "/invoke"))
        .timeout(Duration.ofSeconds(120)).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(), HttpResponse.BodyHandlers.ofString());
    double clientMillis = (System.nanoTime() - sent) / 1e6;
    if (r.statusCode() != 200) {
      throw new IOException("invoke answered " + r.statusCode() + ": " + r.body());
    }
    String header = r.headers().firstValue("Server-Timing").orElse("");
    Matcher tier = TIMING_TIER.matcher(header);
    return new Timed(clientMillis, serverTiming(header), tier.find() ? tier.group(1) : null);
  }

  /** Server-Timing's {@code name;dur=millis} entries, in order (an entry without a duration left out). */
  static Map<String, Double> serverTiming(String header) {
    Map<String, Double> entries = new LinkedHashMap<>();
    Matcher m = TIMING.matcher(header);
    while (m.find()) {
      entries.put(m.group(1), Double.parseDouble(m.group(2)));
    }
    return entries;
  }

  /** The instance that served the last request (the first that served one), as the function's state shows it. */
  private JsonNode servedBy() throws Exception {
    JsonNode instances = getJson("/v1/functions/" + model).path("instances");
    for (JsonNode i : instances) {
      if (i.path("served").asLong() > 0) {
        return i;
      }
    }
    return instances.path(0);
  }

  /** Registers the function again: its instance retires, and its next request starts a fresh one (cold). */
  private void reregister() throws Exception {
    reregister(null);
  }

  /**
   * Registers the function again, then waits until it is ready for a cold start; with {@code from}, until its image
   * waits in that tier: {@code hbm}, a device's HBM tier holds its bytes; {@code host-cache}, it is staged in the host
   * cache and no HBM tier holds it. The milliseconds from the registration until ready.
   */
  private double reregister(String from) throws Exception {
    long registered = System.nanoTime();
    String token = System.getenv("THAW_ADMIN_TOKEN");
    HttpRequest.Builder b = HttpRequest.newBuilder(url.resolve("/v1/functions/" + model))
        .timeout(Duration.ofSeconds(60)).header("Content-Type", "application/json")
        .PUT(HttpRequest.BodyPublishers.ofString(JSON.createObjectNode().put("image", image).toString()));
    if (token != null) {
      b.header("Authorization", "Bearer " + token);
    }
    HttpResponse<String> r = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    if (r.statusCode() / 100 != 2) {
      throw new IOException("PUT /v1/functions/" + model + " answered " + r.statusCode() + ": " + r.body());
    }
    // Ready for a cold start like any other: the retired instance gone (its weights handed to the HBM tier, where the
    // server keeps one), and a warm worker idle in the pool for the next start.
    // Staging a 16 GB image into the host cache after a registration takes seconds: a tier gets longer.
    int seconds = from == null ? 30 : 60;
    long until = System.nanoTime() + seconds * 1_000_000_000L;
    while (System.nanoTime() < until) {
      JsonNode state = getJson("/v1/functions/" + model);
      boolean gone = state.path("instances").isEmpty();
      boolean held = false;
      for (JsonNode bytes : state.path("image").path("hbmBytes")) {
        held |= bytes.asLong() > 0;
      }
      boolean noTier = state.path("image").isMissingNode() || state.path("image").path("hbmBytes").isEmpty();
      if (from != null && state.path("image").isMissingNode()) {
        throw new IOException("the server reports no tiers for " + model + "'s image (instances in process?): "
            + state);
      }
      boolean ready = from == null ? held || noTier
          : from.equals("hbm") ? held
          : state.path("image").path("hostCache").asText().equals("cached") && !held;
      if (gone && ready && idleWorkers() > 0) {
        return (System.nanoTime() - registered) / 1e6;
      }
      Thread.sleep(50);
    }
    throw new IOException("the function was not ready for a cold start" + (from == null ? "" : " from " + from)
        + " " + seconds + " s after it was registered again: " + getJson("/v1/functions/" + model));
  }

  /** Idle workers of the pool, all devices ({@code thaw_pool_workers{state="idle"}}); 1 without a pool. */
  private int idleWorkers() throws Exception {
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve("/metrics")).timeout(Duration.ofSeconds(30))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    Matcher m = IDLE.matcher(r.body());
    int idle = 0;
    boolean any = false;
    while (m.find()) {
      any = true;
      idle += (int) Double.parseDouble(m.group(1));
    }
    return any ? idle : 1;
  }

  private JsonNode getJson(String path) throws Exception {
    HttpResponse<String> r = http.send(HttpRequest.newBuilder(url.resolve(path)).timeout(Duration.ofSeconds(30))
        .GET().build(), HttpResponse.BodyHandlers.ofString());
    return JSON.readTree(r.body());
  }

  private void write(String phase, ObjectNode o) throws IOException {
    JSON.writerWithDefaultPrettyPrinter().writeValue(out.resolve(phase + ".json").toFile(), o);
  }

  private JsonNode read(String phase) throws IOException {
    Path p = out.resolve(phase + ".json");
    return Files.isRegularFile(p) ? JSON.readTree(p.toFile()) : null;
  }

  /** {@code count}, {@code median}, {@code min} and {@code max} of {@code v} (NaN for none), and every value. */
  static ObjectNode stats(List<Double> v) {
    ObjectNode o = JSON.createObjectNode().put("count", v.size()).put("median", median(v)).put("min", min(v))
        .put("max", max(v));
    ArrayNode all = o.putArray("values");
    v.forEach(all::add);
    return o;
  }

  static double min(List<Double> v) {
    return v.isEmpty() ? Double.NaN : Collections.min(v);
  }

  static double max(List<Double> v) {
    return v.isEmpty() ? Double.NaN : Collections.max(v);
  }

  /** {@code value} as a positive int, or an IllegalArgumentException that names {@code option}. */
  static int positive(String option, String value) {
    try {
      int n = Integer.parseInt(value);
      if (n > 0) {
        return n;
      }
    } catch (NumberFormatException e) {
      // the message below says what was wrong
    }
    throw new IllegalArgumentException(option + " takes a positive whole number, not " + value);
  }

  static double median(List<Double> v) {
    return percentile(v, 50);
  }

  /** The nearest-rank percentile; NaN for none. */
  static double percentile(List<Double> v, double p) {
    if (v.isEmpty()) {
      return Double.NaN;
    }
    List<Double> s = new ArrayList<>(v);
    Collections.sort(s);
    int rank = (int) Math.ceil(p / 100 * s.size());
    return s.get(Math.max(0, Math.min(s.size() - 1, rank - 1)));
  }
}
