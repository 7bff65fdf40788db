package dev.thaw.examples.wait;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.examples.PtxRegeneration;
import dev.thaw.runtime.ptx.PtxEntries;
import org.junit.jupiter.api.Test;

/** The checked-in wait.ptx is what wait.cu compiles to, with the parameters the sim twin reads. */
class WaitPtxTest {

  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    PtxRegeneration.assertCurrent("wait.cu", WaitFunction.ptx(), "build-wait-ptx.sh");
  }

  @Test
  void theSimReadsTheRealModule() {
    var entry = PtxEntries.parse(WaitFunction.ptx()).entries().get(WaitSimKernels.Wait.ENTRY);
    assertEquals(2, entry.count());
  }
}
