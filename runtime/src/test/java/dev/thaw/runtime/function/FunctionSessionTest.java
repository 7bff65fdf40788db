package dev.thaw.runtime.function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.gpu.AddressUnavailableException;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.cuda.CudaDriver;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

class FunctionSessionTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  static Stream<String> drivers() {
    return Stream.of("sim", "cuda");
  }

  private static Supplier<GpuDriver> opener(String name) {
    if (name.equals("cuda")) {
      Assumptions.assumeTrue(CudaDriver.availability().available(),
          () -> "no usable GPU: " + CudaDriver.availability().unavailabilityCause());
      return CudaDriver::open;
    }
    return () -> SimDriver.open(new SimOptions());
  }

  /**
   * The point of the SPI: what init built is captured as a table, device bytes and JSON, and a session
   * rebuilt from them elsewhere serves the same response without init running. On the sim, the second driver
   * is the second process; on CUDA, the first context is closed first (one process, same addresses).
   */
  @ParameterizedTest
  @MethodSource("drivers")
  void aRebuiltSessionServesTheSameResponseWithoutInit(String driverName) throws Exception {
    Supplier<GpuDriver> open = opener(driverName);
    SaxpyFunction f = new SaxpyFunction();
    JsonNode request = JSON.readTree("{\"a\": 2.5}");

    SessionTable table;
    List<ByteBuffer> contents = new ArrayList<>();
    JsonNode stateJson;
    JsonNode first;
    try (GpuDriver driver = open.get(); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      SaxpyFunction.State state = f.init(session, JSON.readTree("{\"n\": 5000, \"seed\": 7}"));
      first = f.invoke(session, state, FunctionRequest.of(request)).json();
      table = session.table();
      for (AllocationRecord a : table.allocations()) {
        ByteBuffer b = ByteBuffer.allocateDirect((int) a.size());
        session.download(new BufferRef(a.name()), 0, b);
        contents.add(b);
      }
      stateJson = HostStates.write(state);
    }
    assertEquals(List.of("x", "y", "out"), table.allocations().stream().map(AllocationRecord::name).toList());
    assertEquals("contract/thaw_test_saxpy", stateJson.get("saxpy").asText());
    assertEquals("x", stateJson.get("x").asText());
    assertTrue(table.modules().get(0).cubin().length > 0);

    try (GpuDriver driver = open.get(); GpuContext ctx = driver.createContext(0);
        FunctionSession restored = FunctionSession.rebuild(ctx, table)) {
      for (int i = 0; i < table.allocations().size(); i++) {
        AllocationRecord a = table.allocations().get(i);
        assertEquals(a.address(), restored.address(new BufferRef(a.name())), "same address for " + a.name());
        restored.upload(new BufferRef(a.name()), 0, contents.get(i));
      }
      SaxpyFunction.State state = HostStates.read(stateJson, SaxpyFunction.State.class);
      JsonNode again = f.invoke(restored, state, FunctionRequest.of(request)).json();
      assertEquals(first, again);
      ByteBuffer x = ByteBuffer.allocateDirect(20000);
      restored.download(state.x(), 0, x);
      assertEquals(contents.get(0), x);
    }
  }

  @Test
  void rebuildingWhereTheAddressesAreTakenFailsAndLeavesNothingBehind() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      new SaxpyFunction().init(session, JSON.readTree("{\"n\": 64}"));
      long before = driver.memoryInUse();
      assertThrows(AddressUnavailableException.class, () -> FunctionSession.rebuild(ctx, session.table()));
      assertEquals(before, driver.memoryInUse());
    }
  }

  @Test
  void refusesBadNamesSizesAndReferences() {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      for (String bad : new String[] {"", " x", "../etc", "a/b", "x".repeat(201), null}) {
        assertThrows(IllegalArgumentException.class, () -> session.allocate(bad, 16), String.valueOf(bad));
      }
      BufferRef w = session.allocate("h.0.attn.c_attn.weight", 16);
      assertThrows(IllegalArgumentException.class, () -> session.allocate("h.0.attn.c_attn.weight", 16));
      assertThrows(IllegalArgumentException.class, () -> session.allocate("zero", 0));
      assertThrows(IllegalArgumentException.class, () -> session.upload(w, 8, ByteBuffer.allocate(16)));
      assertThrows(IllegalArgumentException.class, () -> session.download(w, -1, ByteBuffer.allocate(4)));
      assertThrows(IllegalArgumentException.class, () -> session.address(new BufferRef("missing")));
      assertThrows(IllegalArgumentException.class, () -> session.kernel(new KernelRef("nomodule", "k")));
      assertThrows(IllegalArgumentException.class, () -> KernelRef.parse("no-slash"));
      session.free(w);
      session.allocate("h.0.attn.c_attn.weight", 32);
      session.close();
      session.close();
      assertThrows(IllegalStateException.class, () -> session.allocate("again", 16));
    }
  }

  @Test
  void everyLaunchPassesTheInterceptorWithItsArguments() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State s = f.init(session, JSON.readTree("{\"n\": 256}"));
      List<String> seen = new ArrayList<>();
      session.setLaunchInterceptor((kernel, grid, block, shmem, stream, args) ->
          seen.add(kernel + " a=" + args.slab().getFloat(0) + " y=" + args.slab().getLong(16)));
      f.invoke(session, s, FunctionRequest.of(JSON.readTree("{\"a\": 3}")));
      session.kernel(s.saxpy()).launch(Dim3.of(1), Dim3.of(256),
          session.stream(), 4f, session.address(s.x()), session.address(s.out()), 256);
      assertEquals(List.of("contract/thaw_test_saxpy a=3.0 y=" + session.address(s.out()),
          "contract/thaw_test_saxpy a=4.0 y=" + session.address(s.out())), seen);
      session.setLaunchInterceptor(null);
      f.invoke(session, s, FunctionRequest.of(JSON.readTree("{\"a\": 3}")));
      assertEquals(2, seen.size());
    }
  }

  @Test
  void hostStateRoundTripsAndBadStateIsExplained() throws Exception {
    SaxpyFunction.State s = new SaxpyFunction.State(3, new BufferRef("x"), new BufferRef("y"), new BufferRef("o"),
        new KernelRef("m", "k"));
    JsonNode json = HostStates.write(s);
    assertEquals(s, HostStates.read(json, SaxpyFunction.State.class));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> HostStates.read(JSON.readTree("{\"n\": 1, \"x\": \"../x\"}"), SaxpyFunction.State.class));
    assertTrue(e.getMessage().startsWith("host state is not a State"), e.getMessage());
  }

  @Test
  void invalidRequestsAreNamed() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State s = f.init(session, JSON.readTree("{\"n\": 16}"));
      InvalidRequestException e = assertThrows(InvalidRequestException.class,
          () -> f.invoke(session, s, FunctionRequest.of(JSON.readTree("{\"b\": 1}"))));
      assertTrue(e.getMessage().contains("'a'"));
      // The session still serves the next request.
      assertTrue(f.invoke(session, s, FunctionRequest.of(JSON.readTree("{\"a\": 1}"))).json().has("sum"));
    }
  }

  @Test
  void loadsFunctionsByClassNameWithClearErrors() {
    assertTrue(FunctionLoader.load(SaxpyFunction.class.getName()) instanceof SaxpyFunction);
    assertThrows(IllegalArgumentException.class, () -> FunctionLoader.load("no.such.Function"));
    IllegalArgumentException notOne = assertThrows(IllegalArgumentException.class,
        () -> FunctionLoader.load(String.class.getName()));
    assertTrue(notOne.getMessage().contains("is not a"));
  }
}
