package dev.thaw.examples.probe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.gpu.CudaError;
import dev.thaw.runtime.gpu.CudaException;
import dev.thaw.runtime.gpu.DeviceBuffer;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.sim.AccessLog;
import dev.thaw.runtime.gpu.sim.AddressRange;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The memory probe on the sim device: it reads exactly what it is asked for, and an offset far outside its buffer
 * is a sticky {@code CUDA_ERROR_ILLEGAL_ADDRESS}, as on a GPU: the request fails with code 700 and every later
 * device call of the process (the sim driver) fails the same way.
 */
class MemoryProbeFunctionTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  private final MemoryProbeFunction f = new MemoryProbeFunction();

  private static FunctionRequest request(String json) throws Exception {
    return FunctionRequest.of(JSON.readTree(json));
  }

  @Test
  void readsTheValuesAtTheOffsetAndTouchesNothingElse() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); SimContext ctx = (SimContext) driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MemoryProbeFunction.State s = f.init(session, JSON.readTree("{\"elements\": 4096, \"maxCount\": 300}"));
      List<SimLaunchRecord> launches = new CopyOnWriteArrayList<>();
      ctx.addLaunchListener(launches::add);
      JsonNode r = f.invoke(session, s, request("{\"offset\": 3790, \"count\": 300}")).json();
      assertEquals(300, r.get("values").size());
      for (int j = 0; j < 300; j++) {
        assertEquals(3790 + j, r.get("values").get(j).floatValue(), "values[" + j + "]");
      }
      // The twin's shape contract: 2 blocks of 256 threads, 300 of them read one float each and write one.
      SimLaunchRecord launch = launches.get(0);
      long values = session.address(s.values());
      long out = session.address(s.out());
      assertEquals(AccessLog.of(AddressRange.of(values + 4L * 3790, 4L * 300)), launch.reads());
      assertEquals(AccessLog.of(AddressRange.of(out, 4L * 300)), launch.writes());
      assertEquals(2, launch.grid().x());

      // Just past the buffer is still mapped (the rest of its 2 MiB slab): garbage, no fault, as on a GPU.
      JsonNode past = f.invoke(session, s, request("{\"offset\": 4096, \"count\": 16}")).json();
      assertEquals(16, past.get("values").size());
      assertTrue(ctx.poisonedBy().isEmpty());
    }
  }

  @ParameterizedTest
  @ValueSource(longs = {MemoryProbeFunction.FAULT_OFFSET, -MemoryProbeFunction.FAULT_OFFSET, Long.MAX_VALUE / 8})
  void anOffsetFarOutsideTheBufferIsAStickyIllegalAddress(long offset) throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); SimContext ctx = (SimContext) driver.createContext(0);
        GpuContext other = driver.createContext(0); DeviceBuffer otherBuffer = other.allocate(64);
        FunctionSession session = FunctionSession.record(ctx)) {
      MemoryProbeFunction.State s = f.init(session, JSON.readTree("{}"));
      assertEquals(7f, f.invoke(session, s, request("{\"offset\": 7, \"count\": 1}")).json().get("values").get(0)
          .floatValue());

      CudaException fault = assertThrows(CudaException.class,
          () -> f.invoke(session, s, request("{\"offset\": " + offset + ", \"count\": 1}")));
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, fault.code(), fault.getMessage());
      assertEquals("CUDA_ERROR_ILLEGAL_ADDRESS", fault.errorName());
      long address = session.address(s.values()) + 4 * offset;
      assertTrue(fault.getMessage().contains(String.format("0x%x", address)), fault.getMessage());
      assertTrue(ctx.poisonedBy().isPresent());

      // Sticky: a good request fails the same way, and so does work on another context of the process.
      CudaException after = assertThrows(CudaException.class,
          () -> f.invoke(session, s, request("{\"offset\": 7, \"count\": 1}")));
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, after.code(), after.getMessage());
      CudaException elsewhere = assertThrows(CudaException.class,
          () -> other.copyHostToDevice(otherBuffer.address(), ByteBuffer.allocateDirect(4)));
      assertEquals(CudaError.CUDA_ERROR_ILLEGAL_ADDRESS, elsewhere.code(), elsewhere.getMessage());
    }
    // A new process (here: a new sim driver) is unaffected.
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MemoryProbeFunction.State s = f.init(session, JSON.readTree("{}"));
      assertEquals(9f, f.invoke(session, s, request("{\"offset\": 9, \"count\": 1}")).json().get("values").get(0)
          .floatValue());
    }
  }

  @Test
  void badRequestsAndConfigsAreRefusedBeforeTheDevice() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); SimContext ctx = (SimContext) driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      MemoryProbeFunction.State s = f.init(session, JSON.readTree("{\"maxCount\": 8}"));
      for (String bad : List.of("[]", "{\"count\": 1}", "{\"offset\": 1.5, \"count\": 1}",
          "{\"offset\": 0, \"count\": 0}", "{\"offset\": 0, \"count\": 9}", "{\"offset\": 0}",
          "{\"offset\": 0, \"count\": 1, \"op\": \"x\"}", "{\"offset\": 99999999999999999999, \"count\": 1}")) {
        InvalidRequestException e = assertThrows(InvalidRequestException.class, () -> f.validate(s, request(bad)),
            bad);
        assertThrows(InvalidRequestException.class, () -> f.invoke(session, s, request(bad)), bad);
        assertTrue(!e.getMessage().isEmpty());
      }
      assertTrue(ctx.poisonedBy().isEmpty(), "no bad request reached the device");
      assertEquals(8, f.invoke(session, s, request("{\"offset\": 0, \"count\": 8}")).json().get("values").size());
      for (String bad : List.of("{\"elements\": 0}", "{\"elements\": 16777217}", "{\"maxCount\": -1}",
          "{\"size\": 3}", "[1]")) {
        assertThrows(InvalidConfigException.class, () -> f.init(session, JSON.readTree(bad)), bad);
      }
    }
  }
}
