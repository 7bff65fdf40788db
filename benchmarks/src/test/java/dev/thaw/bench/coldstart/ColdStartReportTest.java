package dev.thaw.bench.coldstart;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.bench.coldstart.ColdStartResult.AnswerCheck;
import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.Environment;
import dev.thaw.bench.coldstart.ColdStartResult.Sample;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** How answers are judged, and how a restore's Chrome trace becomes a timeline. */
class ColdStartReportTest {

  @TempDir
  Path dir;

  private static JsonNode tokens(int id) throws Exception {
    return ColdStartResult.JSON.readTree("{\"tokens\": [[" + id + "]]}");
  }

  private static ContenderResult ran(String id, JsonNode answer, Double gap) {
    return new ContenderResult(id, id, Status.RAN, null, List.of(new Sample(10, Map.of("all", 10.0), answer, gap, null)));
  }

  private static PreparedModel model(JsonNode buildAnswer) {
    return new PreparedModel(Workload.named("gpt2-tiny"), false, null, null, 0, "t", 1L, buildAnswer, true, null);
  }

  @Test
  void answersAgreeDifferOrTieByTheReportedGap() throws Exception {
    AnswerCheck agree = ColdStartRun.checkAnswers(model(tokens(5)),
        List.of(ran("thaw-process", tokens(5), null), ran("pytorch-scratch", tokens(5), 1.5)));
    assertEquals("agree", agree.verdict(), agree.detail());

    AnswerCheck differ = ColdStartRun.checkAnswers(model(tokens(5)),
        List.of(ran("thaw-process", tokens(5), null), ran("pytorch-scratch", tokens(7), 1.5)));
    assertEquals("DIFFER", differ.verdict());
    assertTrue(differ.failed());
    assertTrue(differ.detail().contains("[[7]]") && differ.detail().contains("pytorch-scratch"), differ.detail());

    AnswerCheck tie = ColdStartRun.checkAnswers(model(tokens(5)),
        List.of(ran("thaw-process", tokens(5), null), ran("pytorch-scratch", tokens(7), 0.01)));
    assertEquals("near-tie", tie.verdict(), tie.detail());

    AnswerCheck alone = ColdStartRun.checkAnswers(model(null), List.of(ran("thaw-process", tokens(5), null)));
    assertEquals("n/a", alone.verdict());
  }

  @Test
  void aChromeTraceBecomesLanesOfSpansAndATimeline() throws Exception {
    Path trace = dir.resolve("restore.trace.json");
    Files.writeString(trace, """
        {"traceEvents": [
          {"ph": "M", "pid": 1, "tid": 2, "name": "thread_name", "args": {"name": "restore stream"}},
          {"ph": "M", "pid": 1, "tid": 3, "name": "thread_name", "args": {"name": "compute stream"}},
          {"ph": "X", "pid": 1, "tid": 2, "name": "copy wte", "cat": "copy", "ts": 1000, "dur": 4000},
          {"ph": "B", "pid": 1, "tid": 3, "name": "gpt2_embed", "ts": 3000},
          {"ph": "E", "pid": 1, "tid": 3, "ts": 3500},
          {"ph": "X", "pid": 1, "tid": 2, "name": "copy h.0", "cat": "copy", "ts": 5000, "dur": 2000}
        ]}
        """);
    ChromeTrace t = ChromeTrace.read(trace);
    assertEquals(List.of("restore stream", "compute stream"), t.lanes());
    assertEquals(3, t.spans().size());
    ChromeTrace.Span embed = t.spans().get(1);
    assertEquals("gpt2_embed", embed.name());
    assertEquals(2.0, embed.startMillis(), 1e-9, "relative to the first span, in ms");
    assertEquals(2.5, embed.endMillis(), 1e-9);

    ColdStartResult empty = new ColdStartResult(ColdStartResult.FORMAT, true, "sim", "now", List.of(), 1, 1,
        new Environment("thaw", null, null, null, null, null, null, "no GPU"), List.of(), null, List.of());
    List<String> lines = ColdStart.plots(empty, dir.resolve("out"), t);
    assertTrue(lines.stream().anyMatch(l -> l.contains("not drawn: Time to first response per contender: no contender ran")),
        lines.toString());
    assertTrue(Files.size(dir.resolve("out/plots/restore-timeline.png")) > 1000, lines.toString());
    assertTrue(Files.readString(dir.resolve("out/plots/restore-timeline.svg")).contains("SIMULATED"));
  }
}
