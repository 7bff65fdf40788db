package dev.thaw.examples.mlp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.thaw.examples.PtxRegeneration;
import dev.thaw.runtime.ptx.PtxEntries;
import org.junit.jupiter.api.Test;

/** The checked-in mlp.ptx is what mlp.cu compiles to, and it keeps the signature the sim device loads. */
class MlpPtxTest {

  @Test
  void checkedInPtxIsWhatTheSourceCompilesTo() throws Exception {
    PtxRegeneration.assertCurrent("mlp.cu", MlpFunction.ptx(), "build-mlp-ptx.sh");
  }

  @Test
  void theSimReadsTheRealModule() {
    var info = PtxEntries.parse(MlpFunction.ptx());
    assertEquals(8, info.entries().get("mlp_linear").count());
  }
}
