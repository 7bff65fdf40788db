package dev.thaw.bench.tp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The bench on four simulated devices, as the GPU script runs it: the build in one driver, the cold starts in another
 * (a new process's), the prompt and expected ids read back from the image; its figures are not GPU figures.
 */
class TensorParallelColdStartTest {

  @Test
  void theBuildAndTheColdPhaseRunApartAndTheColdIdsAreTheBuilds(@TempDir Path dir) throws Exception {
    String[] common = {"--shape", "tiny", "--ranks", "2", "--store", dir.resolve("store").toString(), "--rounds",
        "2"};
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(4))) {
      assertEquals(0, TensorParallelColdStart.run(with(common, "--phase", "build", "--out",
          dir.resolve("build.json").toString()), driver));
      assertEquals(0, driver.memoryInUse(), "the build frees its sessions");
    }
    try (SimDriver driver = SimDriver.open(new SimOptions().setDeviceCount(4))) {
      assertEquals(0, TensorParallelColdStart.run(with(common, "--phase", "cold", "--out",
          dir.resolve("cold.json").toString()), driver));
      assertEquals(0, driver.memoryInUse(), "the cold starts free every rank");
    }
    ObjectMapper json = new ObjectMapper();
    JsonNode build = json.readTree(dir.resolve("build.json").toFile());
    JsonNode cold = json.readTree(dir.resolve("cold.json").toFile());
    assertTrue(build.get("image_bytes").asLong() > 0);
    assertEquals(build.get("image_bytes").asLong(), cold.get("image_bytes").asLong());
    assertEquals(2, cold.get("rounds").size());
    assertTrue(cold.get("ids_match").asBoolean());
    for (JsonNode round : cold.get("rounds")) {
      assertEquals(2, round.get("last_byte_ms").size());
      assertTrue(round.get("first_id_ms").asDouble() >= round.get("ready_ms").asDouble());
    }
    assertEquals(2, TensorParallelColdStart.run(new String[] {"--shape", "tiny"}, null), "usage");
  }

  private static String[] with(String[] common, String... more) {
    String[] out = new String[common.length + more.length];
    System.arraycopy(common, 0, out, 0, common.length);
    System.arraycopy(more, 0, out, common.length, more.length);
    return out;
  }
}
