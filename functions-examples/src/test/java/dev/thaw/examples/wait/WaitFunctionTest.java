package dev.thaw.examples.wait;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.sim.AccessLog;
import dev.thaw.runtime.gpu.sim.AddressRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/** The wait function on the sim device: its invoke lasts at least the wait asked for, and it checks what it is sent. */
class WaitFunctionTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  private final WaitFunction f = new WaitFunction();

  private static FunctionRequest request(String json) throws Exception {
    return FunctionRequest.of(JSON.readTree(json));
  }

  @Test
  void anInvokeLastsAtLeastTheWaitAndSaysHowLongTheKernelWaited() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); SimContext ctx = (SimContext) driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      WaitFunction.State s = f.init(session, JSON.readTree("{}"));
      List<SimLaunchRecord> launches = new CopyOnWriteArrayList<>();
      ctx.addLaunchListener(launches::add);
      for (long micros : new long[] {0, 1500, 20_000}) {
        long t = System.nanoTime();
        JsonNode r = f.invoke(session, s, request("{\"micros\": " + micros + "}")).json();
        long took = System.nanoTime() - t;
        assertEquals(micros, r.get("micros").asLong());
        double device = r.get("deviceMicros").asDouble();
        assertTrue(device >= micros, "the kernel waited " + device + " us for a wait of " + micros);
        assertTrue(took >= micros * 1000, "the invoke took " + took + " ns for a wait of " + micros + " us");
      }
      // The twin's shape contract: one thread, 8 bytes written at out, nothing read.
      SimLaunchRecord launch = launches.get(0);
      assertEquals(AccessLog.of(AddressRange.of(session.address(s.out()), 8)), launch.writes());
      assertTrue(launch.reads().isEmpty(), launch.reads().toString());
      assertEquals(1, launch.grid().x());
    }
  }

  @Test
  void refusesWhatIsNotAWaitAndAnyConfig() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); SimContext ctx = (SimContext) driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      assertThrows(InvalidConfigException.class, () -> f.init(session, JSON.readTree("{\"micros\": 3}")));
      WaitFunction.State s = f.init(session, null);
      for (String bad : List.of("{}", "{\"micros\": -1}", "{\"micros\": 1000001}", "{\"micros\": 1.5}",
          "{\"micros\": \"10\"}", "{\"micros\": 10, \"extra\": 1}", "[10]")) {
        InvalidRequestException e = assertThrows(InvalidRequestException.class, () -> f.validate(s, request(bad)),
            bad);
        assertTrue(e.getMessage().contains("micros"), e.getMessage());
      }
      assertThrows(InvalidRequestException.class, () -> f.validate(s, new FunctionRequest(
          JSON.readTree("{\"micros\": 1}"), Optional.of(ByteBuffer.allocate(4)))));
      f.validate(s, request("{\"micros\": " + WaitFunction.MAX_MICROS + "}"));
    }
  }
}
