package dev.thaw.bench.coldstart;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.ModelResult;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import dev.thaw.bench.coldstart.ColdStartSmokeTest.Run;
import dev.thaw.examples.gpt2.HfCheckpoint;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * GPT-2 (the tiny shape) from a Hugging Face folder, with the MLP as a sweep model, on whatever device this
 * machine has (no GPU here: the sim). It runs the PyTorch side's {@code prepare} for real when there is a
 * {@code python3}: without torch or a GPU the PyTorch contenders are skipped with the reason, and Thaw writes
 * the GPT-2 weights itself; a sweep model is run only by the contenders that sweep; two image sizes make the
 * scaling plot; one and two cold starts at once through the context pool make the concurrency plot.
 */
class ColdStartGpt2SweepTest {

  @TempDir
  Path dir;

  @Test
  void gpt2FromAHuggingFaceFolderWithAnMlpSweepAndConcurrentColdStarts() throws Exception {
    Path out = dir.resolve("out");
    Path work = dir.resolve("work");
    Run run = ColdStartSmokeTest.run("--models", "gpt2-tiny", "--sweep", "mlp", "--runs", "1", "--sweep-runs", "1",
        "--contenders", "thaw-process,pytorch-scratch,driver-checkpoint", "--concurrency", "1,2", "--device", "auto",
        "--out", out.toString(), "--work", work.toString());
    ColdStartResult r = ColdStartResult.read(out.resolve(ColdStart.JSON_FILE));
    if (!r.simulated()) {
      return; // a GPU host: the real run is scripts/gpu/harness-run.sh's business, not this test's
    }
    assertEquals(0, run.exit(), run.log());
    assertTrue(r.environment().pythonUnavailable() != null, "no GPU, so PyTorch cannot have run");
    assertTrue(Files.isRegularFile(work.resolve("weights/gpt2-tiny").resolve(HfCheckpoint.WEIGHTS_FILE)));
    assertTrue(Files.isRegularFile(work.resolve("weights/gpt2-tiny").resolve(HfCheckpoint.CONFIG_FILE)));

    ModelResult gpt2 = r.models().get(0);
    assertEquals("gpt2-tiny", gpt2.model());
    assertFalse(gpt2.sweep());
    ContenderResult thaw = gpt2.contender(ThawProcessContender.ID).orElseThrow();
    assertEquals(Status.RAN, thaw.status(), thaw.reason());
    int token = thaw.samples().get(0).answer().get("tokens").get(0).get(0).asInt();
    assertTrue(token >= 0 && token < 97, "a token of the tiny vocabulary: " + token);
    assertEquals("agree", gpt2.answers().verdict(), gpt2.answers().detail());
    assertEquals(Status.SKIPPED, gpt2.contender(PytorchScratchContender.ID).orElseThrow().status());

    ModelResult mlp = r.models().get(1);
    assertTrue(mlp.sweep());
    assertTrue(mlp.contender(PytorchScratchContender.ID).isEmpty(), "PyTorch from scratch does not sweep");
    assertEquals(Status.RAN, mlp.contender(ThawProcessContender.ID).orElseThrow().status());
    assertTrue(mlp.contender(DriverCheckpointContender.ID).isPresent(), "the driver checkpoint sweeps");

    assertTrue(Files.size(out.resolve("plots/scaling-image-size.png")) > 1000);

    // Two cold starts at once through the context pool, each answered.
    ColdStartResult.Concurrency c = r.concurrency();
    assertEquals("gpt2-tiny", c.model(), "the last main model by default");
    assertEquals(2, c.levels().size(), String.valueOf(c.skipped()));
    assertEquals(1, c.levels().get(0).ttfrMillis().size());
    assertEquals(2, c.levels().get(1).ttfrMillis().size());
    assertTrue(c.levels().get(1).last() >= c.levels().get(1).median());
    assertTrue(Files.size(out.resolve("plots/scaling-concurrency.png")) > 1000);
    String md = Files.readString(out.resolve(ColdStart.REPORT_FILE));
    assertTrue(md.contains("## Time to first response against image size"), md);
  }
}
