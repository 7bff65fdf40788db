package dev.thaw.examples.probe;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.examples.PtxRegeneration;
import dev.thaw.runtime.ptx.PtxEntries;
import org.junit.jupiter.api.Test;

/** The checked-in probe.ptx is what probe.cu compiles to, with the parameters the sim twin reads. */
class ProbePtxTest {

  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    PtxRegeneration.assertCurrent("probe.cu", MemoryProbeFunction.ptx(), "build-probe-ptx.sh");
  }

  @Test
  void theSimReadsTheRealModule() {
    var entry = PtxEntries.parse(MemoryProbeFunction.ptx()).entries().get(ProbeSimKernels.Read.ENTRY);
    assertEquals(4, entry.count());
  }
}
