package dev.thaw.runtime.function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.gpu.Dim3;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.KernelArgs;
import dev.thaw.runtime.gpu.sim.SimContext;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimLaunchRecord;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;

/** Pins the hook GPU profiling uses: a {@link LaunchRedirect} runs a launch in the session kernel's place. */
class LaunchRedirectTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Records the calls it gets; launches instead when {@code takeOver}. */
  private static final class Recording implements LaunchRedirect {
    final boolean takeOver;
    final List<String> calls = new ArrayList<>();

    Recording(boolean takeOver) {
      this.takeOver = takeOver;
    }

    @Override
    public void beforeLaunch(KernelRef kernel, Dim3 grid, Dim3 block, int shmem, GpuStream stream, KernelArgs args) {
      calls.add("before " + kernel);
    }

    @Override
    public boolean launchInstead(KernelRef kernel, Dim3 grid, Dim3 block, int shmem, GpuStream stream,
        KernelArgs args) {
      calls.add("instead " + kernel + " " + grid + " " + args.slab().getInt(24));
      return takeOver;
    }
  }

  @Test
  void aRedirectThatLaunchesReplacesTheKernelAndOneThatDeclinesLeavesItAlone() throws Exception {
    try (SimDriver driver = SimDriver.open(new SimOptions()); GpuContext ctx = driver.createContext(0);
        FunctionSession session = FunctionSession.record(ctx)) {
      SaxpyFunction f = new SaxpyFunction();
      SaxpyFunction.State s = f.init(session, JSON.readTree("{\"n\": 300}"));
      FunctionRequest request = FunctionRequest.of(JSON.readTree("{\"a\": 2}"));
      JsonNode plain = f.invoke(session, s, request).json();
      List<SimLaunchRecord> launched = new ArrayList<>();
      Consumer<SimLaunchRecord> listener = launched::add;
      ((SimContext) ctx).addLaunchListener(listener);

      Recording declines = new Recording(false);
      session.setLaunchInterceptor(declines);
      assertEquals(plain, f.invoke(session, s, request).json());
      assertEquals(1, launched.size(), "the session's kernel ran");
      assertEquals(List.of("before contract/thaw_test_saxpy", "instead contract/thaw_test_saxpy " + Dim3.of(2)
          + " 300"), declines.calls);

      Recording takes = new Recording(true);
      session.setLaunchInterceptor(takes);
      JsonNode redirected = f.invoke(session, s, request).json();
      assertEquals(1, launched.size(), "the session's kernel did not run");
      assertEquals(2, takes.calls.size());
      // out was only copied from y: the saxpy never ran.
      assertNotEquals(plain, redirected);

      session.setLaunchInterceptor(null);
      assertEquals(plain, f.invoke(session, s, request).json());
      assertEquals(2, launched.size());
      ((SimContext) ctx).removeLaunchListener(listener);
    }
  }
}
