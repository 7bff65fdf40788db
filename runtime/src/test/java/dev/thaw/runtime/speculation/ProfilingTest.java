package dev.thaw.runtime.speculation;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.SaxpyFunction;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The image builder's entry point: on the sim device it is {@link Profiler}, unchanged. */
class ProfilingTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void onTheSimDeviceProfilingIsTheExactProfiler() throws Exception {
    List<FunctionRequest> samples = List.of(FunctionRequest.of(JSON.readTree("{\"a\": 2}")),
        FunctionRequest.of(JSON.readTree("{\"a\": 3}")));
    SaxpyFunction f = new SaxpyFunction();
    AccessProfile viaProfiling;
    AccessProfile viaProfiler;
    try (SpecSession s = new SpecSession()) {
      SaxpyFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 300}"));
      viaProfiling = Profiling.profile("saxpy:1", f, s.session, state, samples);
      try (AccessProfiler p = Profiling.attach(s.session)) {
        assertInstanceOf(Profiler.class, p);
      }
    }
    try (SpecSession s = new SpecSession()) {
      SaxpyFunction.State state = f.init(s.session, JSON.readTree("{\"n\": 300}"));
      viaProfiler = Profiler.profile("saxpy:1", f, s.session, state, samples);
    }
    assertEquals(viaProfiler, viaProfiling);
    assertEquals(AccessProfile.OrderSource.RECORDED, viaProfiling.orderSource());
    assertEquals(List.of("x", "out"), viaProfiling.firstTouch());
  }
}
