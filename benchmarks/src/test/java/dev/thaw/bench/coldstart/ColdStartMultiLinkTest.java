package dev.thaw.bench.coldstart;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.bench.coldstart.ColdStartResult.Concurrency;
import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The harness's multi-link contender and its one-cold-start-per-GPU sweep on two simulated devices (the harness in a
 * child JVM with {@code THAW_SIM_DEVICES=2}, as its pools' workers then see two devices): the pooled worker on device 0
 * restores the MLP from the host cache through device 1's link as well and answers as the build did; one cold start
 * per device at once, each through its own link, at levels 1 and 2. With one device the contender is skipped saying
 * why ({@link ColdStartSmokeTest}'s run).
 */
class ColdStartMultiLinkTest {

  @TempDir
  Path dir;

  @Test
  void theMultiLinkContenderAndTheOnePerGpuSweepRunOnTwoSimulatedDevices() throws Exception {
    Path out = dir.resolve("out");
    String java = ProcessHandle.current().info().command().orElse("java");
    List<String> command = new ArrayList<>(List.of(java, "-Xmx512m", "-cp", System.getProperty("java.class.path"),
        ColdStart.class.getName(), "--models", "mlp", "--runs", "2", "--device", "sim", "--contenders",
        ThawPoolColdContender.MULTILINK_ID, "--concurrency", "1,2", "--concurrency-per-gpu", "--out",
        out.toString(), "--work", dir.resolve("work").toString()));
    ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true)
        .redirectOutput(dir.resolve("harness.log").toFile());
    pb.environment().put("THAW_SIM_DEVICES", "2");
    pb.environment().put("THAW_DEVICE", "sim");
    Process p = pb.start();
    if (!p.waitFor(300, TimeUnit.SECONDS)) {
      p.destroyForcibly();
    }
    String log = Files.readString(dir.resolve("harness.log"), StandardCharsets.UTF_8);
    assertEquals(0, p.exitValue(), log);

    ColdStartResult r = ColdStartResult.read(out.resolve(ColdStart.JSON_FILE));
    ContenderResult multiLink = r.models().get(0).contender(ThawPoolColdContender.MULTILINK_ID).orElseThrow();
    assertEquals(Status.RAN, multiLink.status(), multiLink.reason() + "\n" + log);
    assertEquals(2, multiLink.samples().size());
    for (Sample s : multiLink.samples()) {
      assertTrue(s.extra().containsKey("helperBytes"), s.extra().toString());
    }
    assertEquals("agree", r.models().get(0).answers().verdict(), r.models().get(0).answers().detail());

    Concurrency c = r.concurrency();
    assertTrue(c.onePerGpu(), c.toString());
    assertEquals(List.of(1, 2), c.levels().stream().map(ColdStartResult.ConcurrencyLevel::concurrent).toList(),
        c + "\n" + log);
    assertEquals(2, c.levels().get(1).ttfrMillis().size());
    String md = Files.readString(out.resolve(ColdStart.REPORT_FILE));
    assertTrue(md.contains("one per GPU, each from the host cache through its own link"), md);
  }
}
