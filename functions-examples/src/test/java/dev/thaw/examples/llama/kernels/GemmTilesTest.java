package dev.thaw.examples.llama.kernels;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import org.junit.jupiter.api.Test;

/** The product-tile rules: the first rule that holds wins, rules are checked as they are read. */
class GemmTilesTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  private static JsonNode json(String s) throws Exception {
    return JSON.readTree(s);
  }

  @Test
  void theFirstRuleWhoseRowsAndWavesHoldWins() throws Exception {
    GemmTiles t = GemmTiles.parse(json("[{\"tile\": \"llama_gemm_128x128\", \"fromRows\": 65, \"minWaves\": 1},"
        + "{\"tile\": \"llama_gemm_64x64\", \"fromRows\": 9, \"minWaves\": 1},"
        + "{\"tile\": \"llama_gemm_32x32\", \"fromRows\": 9, \"minWaves\": 0}]"), false);
    // The 8B's products on 132 SMs, as the first H200 run measured them best.
    assertEquals(GemmTile.LARGE, t.pick(2000, 4096, Epilogue.RESIDUAL, 132));
    assertEquals(GemmTile.LARGE, t.pick(128, 28672, Epilogue.SWIGLU, 132));    // 224 blocks
    assertEquals(GemmTile.MEDIUM, t.pick(128, 6144, Epilogue.STORE, 132));     // 48 large, 192 medium blocks
    assertEquals(GemmTile.SMALL, t.pick(128, 4096, Epilogue.RESIDUAL, 132));   // 128 medium blocks: under a wave
    assertEquals(GemmTile.MEDIUM, t.pick(16, 28672, Epilogue.SWIGLU, 132));    // too few rows for 128
    // A device of fewer SMs fills its waves with fewer blocks.
    assertEquals(GemmTile.LARGE, t.pick(128, 4096, Epilogue.RESIDUAL, 32));
  }

  @Test
  void bothModulesRulesLoadAndEndInACatchAll() {
    for (boolean wgmma : new boolean[] {false, true}) {
      GemmTiles t = GemmTiles.defaults(wgmma);
      GemmTiles.Rule last = t.rules().get(t.rules().size() - 1);
      assertEquals(0, last.minWaves());
      assertTrue(last.fromRows() <= LlamaKernels.GEMV_MAX_ROWS + 1);
      assertEquals(wgmma, t.rules().stream().anyMatch(r -> r.tile().wgmma()), t.toString());
      for (int m : new int[] {9, 16, 100, 700, 2000, 8000}) {
        GemmTile picked = t.pick(m, 4096, Epilogue.STORE, 132);
        assertTrue(wgmma || !picked.wgmma(), m + ": " + picked);
      }
    }
  }

  @Test
  void rulesThatCannotServeAreRefusedNamingTheRule() throws Exception {
    String catchAll = "{\"tile\": \"llama_gemm_32x32\", \"fromRows\": 9, \"minWaves\": 0}";
    assertTrue(assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("[{\"tile\": "
        + "\"llama_gemm_7x7\", \"fromRows\": 9, \"minWaves\": 0}]"), false)).getMessage().contains("llama_gemm_7x7"));
    assertTrue(assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("[{\"tile\": "
        + "\"llama_wgmma_128x256\", \"fromRows\": 9, \"minWaves\": 1}, " + catchAll + "]"), false)).getMessage()
        .contains("wgmma"));
    assertTrue(assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("[{\"tile\": "
        + "\"llama_gemm_64x64\", \"fromRows\": 100, \"minWaves\": 0}]"), false)).getMessage()
        .contains("every M"));
    assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("[{\"tile\": \"llama_gemm_64x64\", "
        + "\"fromRows\": -1, \"minWaves\": 0}, " + catchAll + "]"), false));
    assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("[]"), true));
    assertThrows(IllegalArgumentException.class, () -> GemmTiles.parse(json("{\"tile\": 1}"), true));
  }
}
