package dev.thaw.bench.coldstart;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.ModelResult;
import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import dev.thaw.examples.safetensors.SafetensorsFile;
import dev.thaw.examples.safetensors.TensorInfo;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The harness end to end on the simulated device, as CI runs it: the MLP, two cold starts of every contender
 * that can run without a GPU (Thaw's fresh process, really spawned; the context pool's workers, really
 * restoring), the others skipped with their reason; the JSON, the table and the plots written and every one of
 * them labelled SIMULATED.
 */
class ColdStartSmokeTest {

  @TempDir
  Path dir;

  @Test
  void mlpOnTheSimulatedDeviceWritesJsonTableAndPlotsLabelledSimulated() throws Exception {
    Path out = dir.resolve("out");
    Path work = dir.resolve("work");
    Run run = run("--models", "mlp", "--runs", "2", "--device", "sim", "--out", out.toString(), "--work",
        work.toString());
    assertEquals(0, run.exit, run.log);

    ColdStartResult r = ColdStartResult.read(out.resolve(ColdStart.JSON_FILE));
    assertTrue(r.simulated(), "a run on the sim device must say so");
    assertTrue(r.device().contains("SIMULATED"), r.device());
    assertEquals(1, r.models().size());
    ModelResult mlp = r.models().get(0);
    assertEquals("mlp", mlp.model());

    ContenderResult thaw = mlp.contender(ThawProcessContender.ID).orElseThrow();
    assertEquals(Status.RAN, thaw.status(), thaw.reason());
    assertEquals(2, thaw.samples().size());
    for (Sample s : thaw.samples()) {
      assertTrue(s.ttfrMillis() > 0, "time to first response " + s.ttfrMillis());
      assertTrue(s.extra().get("exitMillis") >= s.ttfrMillis(), "the response comes before the exit: " + s.extra());
      assertPhasesWithin(s, "thaw-process");
      assertTrue(s.phases().get("copy + verify") > 0, s.phases().toString());
      assertEquals(mlp.imageBytes(), s.extra().get("restoredBytes"), 0.5, "the whole image is restored");
    }
    for (String id : List.of(ThawPoolColdContender.ID, ThawPoolColdContender.CACHE_ID)) {
      ContenderResult pooled = mlp.contender(id).orElseThrow();
      assertEquals(Status.RAN, pooled.status(), pooled.reason());
      assertEquals(2, pooled.samples().size());
      for (Sample s : pooled.samples()) {
        assertPhasesWithin(s, id);
        assertTrue(s.phases().containsKey("acquire") && s.phases().containsKey("rebuild state"), s.phases().toString());
        assertEquals(mlp.imageBytes(), s.extra().get("restoredBytes"), 0.5, "the whole image is restored");
      }
    }
    // Pooled workers restore on demand: BECOME maps and loads, and the copies (every store chunk verified on the way
    // in) run behind the first invoke, so no copy phase of its own shows here.
    assertTrue(mlp.contender(ThawPoolColdContender.ID).orElseThrow().samples().get(0).phases()
        .containsKey("map allocations"), "the pooled worker mapped the image");
    assertTrue(mlp.contender(ThawPoolColdContender.CACHE_ID).orElseThrow().samples().get(0).extra()
        .containsKey("stageMillis"), "the image was staged into the host cache before the clock started");
    ContenderResult warm = mlp.contender(ThawPoolWarmContender.ID).orElseThrow();
    assertEquals(Status.RAN, warm.status(), warm.reason());
    assertEquals(2, warm.samples().size());

    // thaw serve over HTTP: each cold request started an instance (Thaw-Start: cold, checked by the contender)
    // and says where its time went; warm ones found it.
    ContenderResult serverCold = mlp.contender(ThawServerContender.COLD_ID).orElseThrow();
    assertEquals(Status.RAN, serverCold.status(), serverCold.reason());
    assertEquals(2, serverCold.samples().size());
    for (Sample s : serverCold.samples()) {
      assertTrue(s.phases().keySet().containsAll(List.of("acquire", "map", "restore-wait", "invoke", "HTTP + server")),
          s.phases().toString());
      assertPhasesWithin(s, "thaw-process");
    }
    ContenderResult serverWarm = mlp.contender(ThawServerContender.WARM_ID).orElseThrow();
    assertEquals(Status.RAN, serverWarm.status(), serverWarm.reason());
    assertTrue(serverWarm.samples().get(0).phases().containsKey("invoke"));
    assertFalse(serverWarm.samples().get(0).phases().containsKey("restore-wait"), "a warm request restores nothing");
    assertTrue(Files.readString(out.resolve("traces/mlp.trace.json")).contains("restore-wait"),
        "the server's Chrome trace of its cold starts is kept");
    for (String id : List.of(PytorchScratchContender.ID, DriverCheckpointContender.ID)) {
      ContenderResult skipped = mlp.contender(id).orElseThrow();
      assertEquals(Status.SKIPPED, skipped.status(), id);
      assertTrue(skipped.reason().contains("simulated device"), skipped.reason());
    }

    // Every cold start answers as the build did, and as the weights file PyTorch would load answers.
    assertEquals("agree", mlp.answers().verdict(), mlp.answers().detail());
    JsonNode reference = mlpArgmax(work.resolve("weights").resolve("mlp.safetensors"),
        ColdStartResult.JSON.readTree(work.resolve("requests").resolve("mlp.json").toFile()));
    assertEquals(reference, thaw.samples().get(0).answer().get("argmax"),
        "Thaw's image and the safetensors file PyTorch loads hold the same weights");

    String md = Files.readString(out.resolve(ColdStart.REPORT_FILE));
    assertTrue(md.contains("**SIMULATED"), md);
    assertTrue(md.contains("| Thaw, fresh process (thaw run) |"), md);
    assertTrue(md.contains("skipped: the run is on the simulated device"), md);
    for (String plot : List.of("time-to-first-response", "thaw-phases", "restore-timeline")) {
      Path png = out.resolve("plots").resolve(plot + ".png");
      Path svg = out.resolve("plots").resolve(plot + ".svg");
      assertTrue(Files.size(png) > 1000, png + " is drawn");
      assertTrue(Files.readString(svg).contains("<svg"), svg + " is an SVG");
      assertTrue(Files.readString(svg).contains("SIMULATED"), svg + " is titled SIMULATED");
      assertTrue(md.contains("plots/" + plot + ".png"), md);
    }
    assertTrue(md.contains("not drawn: Time to first response against image size"), md);
    assertTrue(run.log.contains("SIMULATED"), run.log);

    // The table and the plots come back from the JSON alone.
    Path again = dir.resolve("again");
    Run plot = run("plot", "--from", out.resolve(ColdStart.JSON_FILE).toString(), "--out", again.toString());
    assertEquals(0, plot.exit, plot.log);
    assertEquals(md, Files.readString(again.resolve(ColdStart.REPORT_FILE)));
    assertTrue(Files.size(again.resolve("plots").resolve("thaw-phases.png")) > 1000);
  }

  record Run(int exit, String log) {}

  static Run run(String... args) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    PrintStream out = new PrintStream(bytes, true, StandardCharsets.UTF_8);
    int exit = ColdStart.execute(args, out, out);
    return new Run(exit, bytes.toString(StandardCharsets.UTF_8));
  }

  /** The MLP's argmax per row, computed here in fp32 from the weights file PyTorch would load. */
  static JsonNode mlpArgmax(Path weights, JsonNode request) throws IOException {
    try (SafetensorsFile f = SafetensorsFile.open(weights)) {
      var argmax = ColdStartResult.JSON.createArrayNode();
      for (JsonNode row : request.get("inputs")) {
        float[] x = new float[row.size()];
        for (int i = 0; i < x.length; i++) {
          x[i] = row.get(i).floatValue();
        }
        int layers = Workload.MLP_LAYERS.size() - 1;
        for (int l = 0; l < layers; l++) {
          float[] w = floats(f, "w" + l);
          float[] b = floats(f, "b" + l);
          int n = b.length;
          float[] y = new float[n];
          for (int j = 0; j < n; j++) {
            double acc = b[j];
            for (int i = 0; i < x.length; i++) {
              acc += (double) x[i] * w[i * n + j];
            }
            y[j] = l + 1 < layers ? (float) Math.max(0, acc) : (float) acc;
          }
          x = y;
        }
        int best = 0;
        for (int j = 1; j < x.length; j++) {
          if (x[j] > x[best]) {
            best = j;
          }
        }
        argmax.add(best);
      }
      return argmax;
    }
  }

  private static float[] floats(SafetensorsFile f, String name) throws IOException {
    TensorInfo t = f.tensor(name).orElseThrow();
    ByteBuffer buf = ByteBuffer.allocate((int) (t.end() - t.begin())).order(ByteOrder.LITTLE_ENDIAN);
    f.read(t, 0, buf);
    buf.flip();
    float[] v = new float[buf.remaining() / 4];
    buf.asFloatBuffer().get(v);
    assertFalse(v.length == 0, name);
    return v;
  }

  /**
   * Phases are disjoint parts of the time to first response: none is negative and together they never exceed it.
   * How much of it they cover is left alone: on a loaded 2-core machine, untimed gaps (scheduling, GC) grow.
   */
  private static void assertPhasesWithin(Sample s, String contender) {
    double sum = 0;
    for (Map.Entry<String, Double> p : s.phases().entrySet()) {
      assertTrue(p.getValue() >= 0, contender + ": phase " + p.getKey() + " is negative: " + s.phases());
      sum += p.getValue();
    }
    assertTrue(sum > 0 && sum <= s.ttfrMillis() * 1.01 + 1, contender + ": the phases (" + sum
        + " ms) exceed the time to first response (" + s.ttfrMillis() + " ms): " + s.phases());
  }
}
