package dev.thaw.bench.serving;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.server.impl.Invocation;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * What the harness computes and parses without a server: the samples' statistics, the server's own Server-Timing
 * header read back entry by entry, and the arguments a run is refused for (before it sends anything).
 */
class ServingHarnessTest {

  @TempDir
  Path dir;

  @Test
  void statsHoldEverySampleWithItsMedianAndRange() {
    JsonNode s = ServingHarness.stats(List.of(61.5, 58.25, 70.0, 59.0));
    assertEquals(4, s.path("count").asInt());
    assertEquals(59.0, s.path("median").asDouble(), "the nearest-rank median of four is the second smallest");
    assertEquals(58.25, s.path("min").asDouble());
    assertEquals(70.0, s.path("max").asDouble());
    assertEquals("[61.5,58.25,70.0,59.0]", s.path("values").toString(), "every sample, in the order measured");

    JsonNode none = ServingHarness.stats(List.of());
    assertEquals(0, none.path("count").asInt());
    assertTrue(Double.isNaN(none.path("median").asDouble()) && Double.isNaN(none.path("max").asDouble()),
        none.toString());
  }

  @Test
  void readsTheServersTimingHeaderEntryByEntry() {
    Map<String, Double> phases = new LinkedHashMap<>();
    phases.put("queue", 0.012);
    phases.put("acquire", 0.2);
    phases.put("map", 1.25);
    phases.put("restore-wait", 30.5);
    phases.put("invoke", 70.125);
    Invocation cold = new Invocation("llama", FunctionResponse.of(JsonNodeFactory.instance.objectNode()), true,
        phases, "worker 1", "host-cache", 69.7);
    Map<String, Double> read = ServingHarness.serverTiming(cold.serverTiming(102.5));
    assertEquals(List.of("queue", "acquire", "map", "restore-wait", "invoke", "function", "server"),
        List.copyOf(read.keySet()), "the tier is a description, not a duration");
    assertEquals(30.5, read.get("restore-wait"));
    assertEquals(69.7, read.get("function"));
    assertEquals(102.5, read.get("server"));
    assertTrue(ServingHarness.serverTiming("").isEmpty());
  }

  @Test
  void refusesWhatItCannotMeasureBeforeSendingAnything() throws Exception {
    Path out = dir.resolve("out");
    for (List<String> args : List.of(
        List.of("coldttft", "--image", "llama:1"),
        List.of("coldttft", "--image", "llama:1", "--tier", "store"),
        List.of("coldttft", "--tier", "hbm"),
        List.of("coldttft", "--image", "llama:1", "--tier", "hbm", "--runs", "0"),
        List.of("coldttft", "--image", "llama:1", "--tier", "hbm", "--prompt-tokens", "2k"),
        List.of("coldttft", "--image", "llama:1", "--tier", "hbm", "--tokens"),
        List.of("coldttft", "--image", "llama:1", "--tier", "hbm", "--rounds", "5"))) {
      // The phase, then a closed port and the output folder, then the case's own (a dangling option stays last).
      String[] a = List.of(args.subList(0, 1), List.of("--url", "http://127.0.0.1:9", "--out", out.toString()),
          args.subList(1, args.size())).stream().flatMap(List::stream).toArray(String[]::new);
      String err = stderrOf(a);
      assertEquals(2, lastStatus, args + ": " + err);
      assertFalse(err.isBlank(), args + " says why");
    }
    assertFalse(Files.exists(out), "a refused run writes nothing");
    assertThrows(IllegalArgumentException.class, () -> ServingHarness.positive("--runs", "-1"));
    assertEquals(5, ServingHarness.positive("--runs", "5"));
  }

  private int lastStatus;

  /** Runs the harness with {@code args}, its status in {@link #lastStatus}; what it wrote to stderr. */
  private String stderrOf(String[] args) throws Exception {
    PrintStream err = System.err;
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    System.setErr(new PrintStream(b, true, StandardCharsets.UTF_8));
    try {
      lastStatus = ServingHarness.run(args);
    } finally {
      System.setErr(err);
    }
    return b.toString(StandardCharsets.UTF_8);
  }
}
