package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.ModelResult;
import dev.thaw.bench.coldstart.ColdStartResult.Status;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * {@code cold-start.md}: per model, each contender's time to first response (median, min, max) and answer;
 * where each contender's time goes; the image-size sweep beside the PCIe floor; the plots and the notes.
 */
final class MarkdownReport {

  private MarkdownReport() {}

  static String render(ColdStartResult r, List<String> plotLines) {
    StringBuilder md = new StringBuilder();
    md.append("# Cold start: time to first response\n\n");
    if (r.simulated()) {
      md.append("**SIMULATED: Thaw ran on its simulated device. No time here is a GPU time.**\n\n");
    }
    md.append("- device: ").append(r.device()).append('\n');
    var env = r.environment();
    md.append("- thaw: `").append(env.thaw()).append("`\n");
    if (env.torch() != null) {
      md.append("- PyTorch side: python ").append(env.python()).append(", torch ").append(env.torch())
          .append(", transformers ").append(env.transformers()).append('\n');
    }
    if (env.pythonUnavailable() != null) {
      md.append("- PyTorch contenders skipped: ").append(env.pythonUnavailable()).append('\n');
    }
    if (env.h2dGBps() != null) {
      md.append(String.format(Locale.ROOT, "- pinned host-to-device bandwidth: %.1f GB/s (%s)%n", env.h2dGBps(),
          env.h2dSource()));
    }
    md.append("- command: `").append(String.join(" ", r.command())).append("`\n");
    md.append("- started: ").append(r.startedAt()).append("; ").append(r.runs()).append(" cold starts per contender")
        .append(" (").append(r.sweepRuns()).append(" in the size sweep)\n\n");
    md.append("Time to first response: from the start of the cold start (a process spawned; for the driver "
        + "checkpoint, `cuCheckpointProcessRestore` called) to the response in hand. Each cold start is fresh: a new "
        + "process, or a checkpointed process restored.\n");

    for (ModelResult m : r.models()) {
      if (m.sweep()) {
        continue;
      }
      md.append("\n## ").append(m.model());
      if (m.imageBytes() != null) {
        md.append(" (image ").append(bytes(m.imageBytes())).append(", weights ").append(bytes(m.weightsBytes()))
            .append(')');
      }
      md.append("\n\n| contender | median | min | max | runs | answer |\n| --- | ---: | ---: | ---: | ---: | --- |\n");
      for (ContenderResult c : m.contenders()) {
        if (c.ran()) {
          double[] t = c.ttfr();
          md.append("| ").append(c.label()).append(" | ").append(millis(c.median())).append(" | ")
              .append(millis(Arrays.stream(t).min().orElseThrow())).append(" | ")
              .append(millis(Arrays.stream(t).max().orElseThrow())).append(" | ").append(t.length).append(" | `")
              .append(c.samples().get(0).answer()).append("` |\n");
        } else {
          md.append("| ").append(c.label()).append(" | ").append(c.status().name().toLowerCase(Locale.ROOT))
              .append(": ").append(c.reason().replace('|', '/').replace('\n', ' ')).append(" | | | | |\n");
        }
      }
      md.append("\nAnswers: **").append(m.answers().verdict()).append("** — ").append(m.answers().detail()).append('\n');
      ratios(m).ifPresent(line -> md.append('\n').append(line).append('\n'));
    }

    md.append("\n## Where the time goes (median of each phase)\n");
    for (ModelResult m : r.models()) {
      for (ContenderResult c : m.contenders()) {
        if (!c.ran() || m.sweep()) {
          continue;
        }
        md.append("\n**").append(m.model()).append(", ").append(c.label()).append("**: ");
        StringBuilder line = new StringBuilder();
        for (Map.Entry<String, Double> e : c.medianPhases().entrySet()) {
          line.append(line.length() == 0 ? "" : " · ").append(e.getKey()).append(' ').append(millis(e.getValue()));
        }
        md.append(line).append('\n');
      }
    }

    if (r.models().stream().anyMatch(ModelResult::sweep)) {
      sweep(r, md);
    }

    if (r.concurrency() != null) {
      concurrency(r, md);
    }

    md.append("\n## Plots\n\n");
    plotLines.forEach(l -> md.append(l).append('\n'));
    if (!r.notes().isEmpty()) {
      md.append("\n## Notes\n\n");
      r.notes().forEach(n -> md.append("- ").append(n).append('\n'));
    }
    return md.toString();
  }

  /** How many times as long as each of Thaw's cold starts every other contender takes, on one model. */
  private static Optional<String> ratios(ModelResult m) {
    StringBuilder s = new StringBuilder();
    for (String base : List.of(ThawServerContender.COLD_ID, ThawPoolColdContender.CACHE_ID, ThawPoolColdContender.ID,
        ThawPoolColdContender.FULL_ID, ThawProcessContender.ID)) {
      Optional<ContenderResult> thaw = m.contender(base).filter(ContenderResult::ran);
      if (thaw.isEmpty()) {
        continue;
      }
      StringBuilder line = new StringBuilder();
      for (ContenderResult c : m.contenders()) {
        if (c.ran() && !c.id().startsWith("thaw-")) {
          line.append(line.length() == 0 ? "" : ", ").append(c.label())
              .append(String.format(Locale.ROOT, " **%.1f×**", c.median() / thaw.get().median()));
        }
      }
      if (line.length() > 0) {
        s.append(s.length() == 0 ? "" : "\n\n").append("Against ").append(thaw.get().label())
            .append(" (median over median): ").append(line);
      }
    }
    return s.length() == 0 ? Optional.empty() : Optional.of(s.toString());
  }

  private static void sweep(ColdStartResult r, StringBuilder md) {
    Set<String> ids = new LinkedHashSet<>();
    r.models().forEach(m -> m.contenders().stream().filter(c -> c.status() == Status.RAN).forEach(c -> ids.add(c.id())));
    md.append("\n## Time to first response against image size (medians)\n\n| model | image |");
    ids.forEach(id -> md.append(' ').append(id).append(" |"));
    Double gbps = r.environment().h2dGBps();
    md.append(gbps != null ? " PCIe floor |" : "").append("\n| --- | ---: |");
    ids.forEach(id -> md.append(" ---: |"));
    md.append(gbps != null ? " ---: |" : "").append('\n');
    r.models().stream().filter(m -> m.imageBytes() != null)
        .sorted((a, b) -> Long.compare(a.imageBytes(), b.imageBytes()))
        .forEach(m -> {
          md.append("| ").append(m.model()).append(" | ").append(bytes(m.imageBytes())).append(" |");
          for (String id : ids) {
            md.append(' ').append(m.contender(id).filter(ContenderResult::ran).map(c -> millis(c.median())).orElse("—"))
                .append(" |");
          }
          if (gbps != null) {
            md.append(' ').append(millis(m.imageBytes() / (gbps * 1e6))).append(" |");
          }
          md.append('\n');
        });
  }

  private static void concurrency(ColdStartResult r, StringBuilder md) {
    ColdStartResult.Concurrency c = r.concurrency();
    md.append("\n## Cold starts at once (").append(c.model()).append(", through the context pool")
        .append(c.onePerGpu() ? ", one per GPU, each from the host cache through its own link" : "").append(")\n\n");
    if (c.levels().isEmpty()) {
      md.append("Not run: ").append(c.skipped()).append('\n');
      return;
    }
    Double gbps = r.environment().h2dGBps();
    md.append("| at once | median | the last to answer |").append(gbps == null ? ""
        : c.onePerGpu() ? " PCIe floor (image, each GPU its own link) |" : " PCIe floor (N × image) |")
        .append("\n| ---: | ---: | ---: |").append(gbps != null ? " ---: |" : "").append('\n');
    for (ColdStartResult.ConcurrencyLevel l : c.levels()) {
      md.append("| ").append(l.concurrent()).append(" | ").append(millis(l.median())).append(" | ")
          .append(millis(l.last())).append(" |");
      if (gbps != null && c.imageBytes() != null) {
        int sharing = c.onePerGpu() ? 1 : l.concurrent();
        md.append(' ').append(millis(sharing * c.imageBytes() / (gbps * 1e6))).append(" |");
      }
      md.append('\n');
    }
  }

  static String millis(double ms) {
    if (ms >= 10_000) {
      return String.format(Locale.ROOT, "%.1f s", ms / 1000);
    }
    if (ms >= 1000) {
      return String.format(Locale.ROOT, "%.2f s", ms / 1000);
    }
    return String.format(Locale.ROOT, ms >= 10 ? "%.0f ms" : "%.1f ms", ms);
  }

  static String bytes(long b) {
    if (b >= 1_000_000_000L) {
      return String.format(Locale.ROOT, "%.2f GB", b / 1e9);
    }
    if (b >= 1_000_000L) {
      return String.format(Locale.ROOT, "%.1f MB", b / 1e6);
    }
    return String.format(Locale.ROOT, "%.1f kB", b / 1e3);
  }
}
