package dev.thaw.examples.transformer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.SessionTable;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * What the GPT-2 and Llama function tests check alike: responses' tokens and logits, refused requests and configs
 * (a clear message, nothing launched, nothing left allocated), and the SPI round trip through a rebuilt session.
 */
public final class FunctionChecks {

  private static final ObjectMapper JSON = new ObjectMapper();

  private FunctionChecks() {}

  public static JsonNode json(String s) {
    try {
      return JSON.readTree(s);
    } catch (Exception e) {
      throw new IllegalArgumentException(s, e);
    }
  }

  /** A response's {@code tokens}, one row a sequence. */
  public static int[][] tokens(JsonNode response) {
    JsonNode t = response.get("tokens");
    int[][] out = new int[t.size()][];
    for (int b = 0; b < t.size(); b++) {
      out[b] = new int[t.get(b).size()];
      for (int i = 0; i < out[b].length; i++) {
        out[b][i] = t.get(b).get(i).asInt();
      }
    }
    return out;
  }

  /** Logits agree: each within {@code rtol} of its size plus {@code atolRms} of the row's RMS. */
  public static void assertLogitsClose(float[] expected, JsonNode got, String what, double rtol, double atolRms) {
    assertEquals(expected.length, got.size(), what);
    double rms = 0;
    for (float e : expected) {
      rms += (double) e * e;
    }
    rms = Math.sqrt(rms / expected.length);
    for (int v = 0; v < expected.length; v++) {
      double g = got.get(v).asDouble();
      double tol = rtol * Math.abs(expected[v]) + atolRms * rms;
      int at = v;
      assertTrue(Math.abs(g - expected[v]) <= tol,
          () -> what + " logit " + at + ": expected " + expected[at] + ", got " + g);
    }
  }

  /**
   * Each of {@code bad} is refused with a message containing its {@code says}, without a launch ({@code launches}
   * counts them), and {@code good} is then served as before ({@code first}).
   */
  public static <S> void assertRefusesRequests(ThawFunction<S> f, FunctionSession session, S s,
      AtomicInteger launches, JsonNode good, JsonNode first, String[] bad, String[] says) throws Exception {
    int before = launches.get();
    for (int i = 0; i < bad.length; i++) {
      JsonNode r = json(bad[i]);
      int at = i;
      InvalidRequestException e = assertThrows(InvalidRequestException.class,
          () -> f.invoke(session, s, FunctionRequest.of(r)), bad[i]);
      assertTrue(e.getMessage().contains(says[i]), () -> bad[at] + " -> " + e.getMessage());
    }
    assertEquals(before, launches.get(), "a refused request launches nothing");
    assertEquals(first, f.invoke(session, s, FunctionRequest.of(good)).json(), "the next request is served");
  }

  /** Each of {@code bad} fails init with a message containing its {@code says}, and leaves no device memory. */
  public static void assertRefusesConfigs(ThawFunction<?> f, String[] bad, String[] says) {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0)) {
      for (int i = 0; i < bad.length; i++) {
        try (FunctionSession session = FunctionSession.record(ctx)) {
          JsonNode c = json(bad[i]);
          InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> f.init(session, c), bad[i]);
          int at = i;
          assertTrue(e.getMessage().contains(says[i]), () -> bad[at] + " -> " + e.getMessage());
        }
      }
      assertEquals(0, driver.memoryInUse(), "closed sessions leave nothing behind");
    }
  }

  /** What init left for a rebuild: the session's table and the host state as JSON. */
  public record Snapshot(SessionTable table, JsonNode state) {}

  /**
   * The SPI's point: init's table, device bytes and state JSON rebuild a session on another (simulated) device that
   * serves {@code request} as the first one did, without init (same addresses, same response).
   */
  public static <S> Snapshot assertRebuiltSessionServesTheSame(ThawFunction<S> f, JsonNode config, JsonNode request)
      throws Exception {
    SessionTable table;
    List<ByteBuffer> contents = new ArrayList<>();
    JsonNode stateJson;
    JsonNode first;
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      S state = f.init(session, config);
      first = f.invoke(session, state, FunctionRequest.of(request)).json();
      table = session.table();
      for (AllocationRecord a : table.allocations()) {
        ByteBuffer b = ByteBuffer.allocateDirect((int) a.size());
        session.download(new BufferRef(a.name()), 0, b);
        contents.add(b);
      }
      stateJson = HostStates.write(state);
    }

    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession restored = FunctionSession.rebuild(ctx, table)) {
      for (int i = 0; i < table.allocations().size(); i++) {
        AllocationRecord a = table.allocations().get(i);
        assertEquals(a.address(), restored.address(new BufferRef(a.name())), a.name());
        restored.upload(new BufferRef(a.name()), 0, contents.get(i));
      }
      S state = HostStates.read(stateJson, f.stateType());
      assertEquals(first, f.invoke(restored, state, FunctionRequest.of(request)).json());
    }
    return new Snapshot(table, stateJson);
  }
}
