package dev.thaw.bench.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The overhead harness end to end on the sim device, small: an MLP image built, the anchor measured, a real
 * server with in-process instances and one with a pooled worker process, each answering every measured request
 * warm with the {@code server} and {@code function} entries in {@code Server-Timing}.
 */
class ServerOverheadTest {

  @Test
  void measuresBothServersAgainstTheAnchor() throws Exception {
    String config = "{\"layers\": [8, 16, 4], \"seed\": 3}";
    byte[] request = ServerOverhead.defaultRequest(ServerOverhead.JSON.readTree(config));
    ObjectNode r = ServerOverhead.run(new ServerOverhead.Options(ServerOverhead.MLP, 40, 40, List.of("in-process", "pool"), config,
        request, request,
        List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"), null, List.of(), false));
    assertTrue(r.path("simulated").asBoolean(), "CI runs this on the sim device: " + r.path("device"));
    assertTrue(r.path("anchorP50Micros").asDouble() > 0, r.toString());
    for (String kind : List.of("in-process", "pool")) {
      JsonNode s = r.path("servers").path(kind);
      assertEquals(kind.equals("pool") ? "pool" : "in-process", s.path("instance").asText(), s.toString());
      assertEquals(40, s.at("/roundTripMicros/count").asInt(), s.toString());
      assertEquals(40, s.at("/firstWarmRoundTripMicros/count").asInt(), "the warm-up's first requests, apart");
      for (String entry : List.of("queue", "invoke", "function", "server")) {
        assertEquals(40, s.at("/serverTimingMicros/" + entry + "/count").asInt(), entry + " in " + s);
      }
      // What the server holds is inside the client's round trip; what the function took is inside the server's.
      assertTrue(s.at("/serverTimingMicros/server/p50").asDouble() <= s.at("/roundTripMicros/p50").asDouble(),
          s.toString());
      assertTrue(s.has("overheadMicros") && s.has("serverMinusFunctionMicros"), s.toString());
      assertTrue(s.at("/serverMinusFunctionMicros/min").asDouble() >= 0, s.toString());
      // The event loop (named by the kernel in 15 characters) woke for the requests and spent CPU on them; a pool's
      // worker threads are counted apart.
      JsonNode loop = s.path("threadsPerRequest").path("vert.x-eventloo");
      assertTrue(loop.path("wakes").asDouble() > 0 && loop.path("cpuMicros").asDouble() > 0, s.toString());
      boolean workerThreads = false;
      for (var names = s.path("threadsPerRequest").fieldNames(); names.hasNext(); ) {
        workerThreads |= names.next().startsWith("worker:");
      }
      assertEquals(kind.equals("pool"), workerThreads, s.path("threadsPerRequest").toString());
    }
    assertTrue(ServerOverhead.summary(r).contains("pool"), ServerOverhead.summary(r));
  }

  /**
   * A sweep over the invoke's length with the wait function: one result per length, each against its own anchor,
   * and the function's own time (in-process and in the worker) at least the wait the request asked for; its client
   * polls for the responses (and still reads every one whole).
   */
  @Test
  void sweepsTheInvokesLength() throws Exception {
    ObjectNode r = ServerOverhead.run(new ServerOverhead.Options(ServerOverhead.WAIT, 30, 30,
        List.of("in-process", "pool"), "{}", ServerOverhead.waitRequest(0), ServerOverhead.waitRequest(0),
        List.of("-XX:+UseSerialGC", "-Xmx256m", "-XX:TieredStopAtLevel=1"), null, List.of(0L, 3000L), true));
    assertEquals(ServerOverhead.WAIT, r.path("function").asText());
    assertTrue(r.path("spinClient").asBoolean(), "this run's client polls for its responses");
    for (long micros : List.of(0L, 3000L)) {
      JsonNode step = r.path("steps").path(micros + "us");
      assertEquals(micros, step.path("waitMicros").asLong(), r.toString());
      assertEquals(30, step.path("requests").asInt(), step.toString());
      assertTrue(step.at("/anchor/invokeMicros/min").asDouble() >= micros, step.toString());
      for (String kind : List.of("in-process", "pool")) {
        JsonNode s = step.path("servers").path(kind);
        assertEquals(30, s.at("/roundTripMicros/count").asInt(), s.toString());
        assertTrue(s.at("/serverTimingMicros/function/min").asDouble() >= micros, s.toString());
        assertTrue(s.at("/roundTripMicros/min").asDouble() >= micros, s.toString());
        assertTrue(s.has("serverMinusFunctionMicros"), s.toString());
      }
    }
    assertTrue(ServerOverhead.summary(r).contains("invoke waits 3000us"), ServerOverhead.summary(r));
  }
}
