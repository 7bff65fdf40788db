package dev.thaw.bench.coldstart;

import dev.thaw.bench.coldstart.ColdStartResult.ContenderResult;
import dev.thaw.bench.coldstart.ColdStartResult.ModelResult;
import java.awt.BasicStroke;
import java.awt.Color;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.CategoryChart;
import org.knowm.xchart.CategoryChartBuilder;
import org.knowm.xchart.VectorGraphicsEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.internal.chartpart.Chart;
import org.knowm.xchart.style.AxesChartStyler;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The plots of a run, each as PNG and SVG (XChart): time to first response per contender (log scale); where
 * Thaw's cold start goes, phase by phase (stacked); time to first response against image size with the PCIe
 * floor; a restore's timeline from a Chrome trace. A plot the data cannot support is not drawn, and
 * {@link #render} says why, as it does when this Java cannot draw at all (no {@code java.desktop}, no fonts):
 * the JSON holds everything, so {@code thaw-bench cold-start plot} can draw them elsewhere.
 */
final class ColdStartPlots {

  static final String FOLDER = "plots";
  private static final int WIDTH = 1000;
  private static final int HEIGHT = 560;

  private ColdStartPlots() {}

  /**
   * Draws every plot the result supports into {@code out/plots}.
   *
   * @return one markdown line per plot: an image link, or what was not drawn and why
   */
  static List<String> render(ColdStartResult r, Path out, ChromeTrace trace) throws IOException {
    List<String> lines = new ArrayList<>();
    Path dir = Files.createDirectories(out.resolve(FOLDER));
    System.setProperty("java.awt.headless", "true");
    String suffix = r.simulated() ? " — SIMULATED device, not GPU times" : "";
    draw(lines, dir, "time-to-first-response", "Time to first response per contender", () -> ttfr(r, suffix));
    draw(lines, dir, "thaw-phases", "Where Thaw's cold start goes", () -> phases(r, suffix));
    draw(lines, dir, "scaling-image-size", "Time to first response against image size", () -> bySize(r, suffix));
    if (r.concurrency() == null) {
      lines.add("- not drawn: Time to first response against concurrent cold starts: not asked for "
          + "(`--concurrency 1,2,4,8`)");
    } else {
      draw(lines, dir, "scaling-concurrency", "Time to first response against concurrent cold starts",
          () -> byConcurrency(r, suffix));
    }
    if (trace != null) {
      draw(lines, dir, "restore-timeline", "Restore timeline (" + trace.source() + ")",
          () -> timeline(trace, suffix));
    } else {
      lines.add("- not drawn: restore timeline: no Chrome trace (the Thaw server's cold contender fetches one; "
          + "`--trace FILE` gives one)");
    }
    return lines;
  }

  /** Makes a chart, or says why there is none. */
  @FunctionalInterface
  private interface ChartMaker {
    Chart<?, ?> make() throws NotDrawn;
  }

  /** The data does not support this plot; the message says why. */
  static final class NotDrawn extends Exception {
    NotDrawn(String why) {
      super(why, null, false, false);
    }
  }

  private static void draw(List<String> lines, Path dir, String name, String title, ChartMaker maker) {
    Path file = dir.resolve(name);
    try {
      Chart<?, ?> chart = maker.make();
      BitmapEncoder.saveBitmap(chart, file.toString(), BitmapEncoder.BitmapFormat.PNG);
      VectorGraphicsEncoder.saveVectorGraphic(chart, file.toString(), VectorGraphicsEncoder.VectorGraphicsFormat.SVG);
      titleSvg(dir.resolve(name + ".svg"), chart.getTitle());
      lines.add("- " + title + " ([SVG](" + FOLDER + "/" + name + ".svg))\n\n  ![" + title + "](" + FOLDER + "/" + name
          + ".png)");
    } catch (NotDrawn e) {
      lines.add("- not drawn: " + title + ": " + e.getMessage());
    } catch (Exception | Error e) {
      // No fonts, no fontconfig, no freetype: AWT fails in many ways on a bare host. No half-written file stays.
      try {
        Files.deleteIfExists(dir.resolve(name + ".png"));
        Files.deleteIfExists(dir.resolve(name + ".svg"));
      } catch (IOException ignored) {
        // The line below says the plot is not there; a stray empty file does not change that.
      }
      lines.add("- not drawn: " + title + ": " + e.getClass().getSimpleName() + ": " + e.getMessage()
          + " (draw it from the JSON elsewhere with `thaw-bench cold-start plot`)");
    }
  }

  static CategoryChart ttfr(ColdStartResult r, String suffix) throws NotDrawn {
    List<ModelResult> main = r.models().stream().filter(m -> !m.sweep()).toList();
    List<String> models = main.stream().map(ModelResult::model).toList();
    Map<String, List<Double>> series = new LinkedHashMap<>();
    for (ModelResult m : main) {
      for (ContenderResult c : m.contenders()) {
        if (c.ran()) {
          series.computeIfAbsent(c.label(), k -> new ArrayList<>());
        }
      }
    }
    if (series.isEmpty()) {
      throw new NotDrawn("no contender ran");
    }
    for (Map.Entry<String, List<Double>> e : series.entrySet()) {
      for (ModelResult m : main) {
        e.getValue().add(m.contenders().stream().filter(c -> c.ran() && c.label().equals(e.getKey())).findFirst()
            .map(ContenderResult::median).orElse(null));
      }
    }
    CategoryChart chart = new CategoryChartBuilder().width(WIDTH).height(HEIGHT)
        .title("Time to first response, median of " + r.runs() + suffix).xAxisTitle("model")
        .yAxisTitle("milliseconds (log scale)").build();
    style(chart.getStyler());
    chart.getStyler().setYAxisLogarithmic(true);
    chart.getStyler().setLabelsVisible(true);
    chart.getStyler().setLabelsFontColorAutomaticEnabled(false);
    chart.getStyler().setLabelsFontColor(Color.DARK_GRAY);
    chart.getStyler().setYAxisDecimalPattern("#,###");
    // XChart draws bars up from the axis minimum, which on a log axis must be set and above zero.
    double smallest = series.values().stream().flatMap(List::stream).filter(v -> v != null && v > 0)
        .mapToDouble(Double::doubleValue).min().orElse(1);
    double largest = series.values().stream().flatMap(List::stream).filter(v -> v != null && v > 0)
        .mapToDouble(Double::doubleValue).max().orElse(10);
    chart.getStyler().setYAxisMin(Math.pow(10, Math.floor(Math.log10(smallest))));
    chart.getStyler().setYAxisMax(Math.pow(10, Math.ceil(Math.log10(largest * 1.01))));
    series.forEach((label, values) -> chart.addSeries(label, models, values));
    return chart;
  }

  /** The stacked plot's groups, in stacking order: each contender's own phases fall into one of them. */
  static final List<String> PHASE_GROUPS = List.of("process start", "context", "acquire", "map", "restore",
      "invoke", "overhead");

  /**
   * The group a contender's phase belongs to: the fresh process's JVM start and context; a worker's acquire; the
   * manifest, allocations and modules (map); the copies, their verification and the host state (restore); the
   * request itself (invoke); what frames, HTTP and queues add (overhead).
   */
  static String phaseGroup(String phase) {
    return switch (phase) {
      case ThawProcessContender.JVM_PHASE -> "process start";
      case "driver + store + context" -> "context";
      case "acquire" -> "acquire";
      case "manifest", "store", "open manifest", "map allocations", "load modules", "placement", "map + modules",
          "map" -> "map";
      case "copy + verify", "copy", "rebuild state", "restore-wait", "start restore", "resident" -> "restore";
      case "invoke", "invoke (round trip)" -> "invoke";
      default -> "overhead";
    };
  }

  static CategoryChart phases(ColdStartResult r, String suffix) throws NotDrawn {
    List<String> categories = new ArrayList<>();
    List<Map<String, Double>> groups = new ArrayList<>();
    for (ModelResult m : r.models()) {
      if (m.sweep()) {
        continue;
      }
      for (ContenderResult c : m.contenders()) {
        if (c.ran() && c.id().startsWith("thaw-")) {
          categories.add(m.model() + " · " + c.id().substring("thaw-".length()));
          Map<String, Double> g = new LinkedHashMap<>();
          c.medianPhases().forEach((phase, ms) -> g.merge(phaseGroup(phase), ms, Double::sum));
          groups.add(g);
        }
      }
    }
    if (categories.isEmpty()) {
      throw new NotDrawn("no Thaw contender ran");
    }
    CategoryChart chart = new CategoryChartBuilder().width(WIDTH + 200).height(HEIGHT + 80)
        .title("Where Thaw's cold start goes, median per phase" + suffix).xAxisTitle("model · contender")
        .yAxisTitle("milliseconds").build();
    style(chart.getStyler());
    chart.getStyler().setLegendPosition(Styler.LegendPosition.OutsideE);
    chart.getStyler().setStacked(true);
    chart.getStyler().setLabelsVisible(false);
    chart.getStyler().setXAxisLabelRotation(20);
    for (String group : PHASE_GROUPS) {
      if (groups.stream().anyMatch(g -> g.containsKey(group))) {
        chart.addSeries(group, categories, groups.stream().map(g -> (Number) g.getOrDefault(group, 0.0)).toList());
      }
    }
    return chart;
  }

  static XYChart bySize(ColdStartResult r, String suffix) throws NotDrawn {
    List<ModelResult> sized = r.models().stream().filter(m -> m.imageBytes() != null && m.imageBytes() > 0)
        .sorted((a, b) -> Long.compare(a.imageBytes(), b.imageBytes())).toList();
    Map<String, double[][]> series = new LinkedHashMap<>();
    Set<String> labels = new LinkedHashSet<>();
    for (ModelResult m : sized) {
      m.contenders().stream().filter(c -> c.ran() && sweeps(c.id())).forEach(c -> labels.add(c.label()));
    }
    for (String label : labels) {
      List<double[]> points = new ArrayList<>();
      for (ModelResult m : sized) {
        m.contenders().stream().filter(c -> c.ran() && c.label().equals(label)).findFirst()
            .ifPresent(c -> points.add(new double[] {m.imageBytes() / 1e9, c.median()}));
      }
      series.put(label, points.toArray(double[][]::new));
    }
    if (sized.size() < 2 || series.isEmpty()) {
      throw new NotDrawn("it needs at least two models of different sizes (--sweep); this run has " + sized.size());
    }
    XYChart chart = new XYChartBuilder().width(WIDTH).height(HEIGHT)
        .title("Time to first response against image size" + suffix).xAxisTitle("image size, GB (log scale)")
        .yAxisTitle("milliseconds (log scale)").build();
    style(chart.getStyler());
    chart.getStyler().setXAxisLogarithmic(true);
    chart.getStyler().setYAxisLogarithmic(true);
    chart.getStyler().setXAxisDecimalPattern("#.###");
    chart.getStyler().setYAxisDecimalPattern("#,###.#");
    series.forEach((label, points) -> {
      XYSeries s = chart.addSeries(label, column(points, 0), column(points, 1));
      s.setMarker(SeriesMarkers.CIRCLE);
    });
    Double gbps = r.environment().h2dGBps();
    if (gbps != null) {
      double[] x = sized.stream().mapToDouble(m -> m.imageBytes() / 1e9).toArray();
      double[] y = sized.stream().mapToDouble(m -> m.imageBytes() / (gbps * 1e6)).toArray();
      XYSeries floor = chart.addSeries(String.format(Locale.ROOT, "PCIe floor (size / %.1f GB/s pinned H2D)", gbps), x, y);
      floor.setMarker(SeriesMarkers.NONE);
      floor.setLineStyle(new BasicStroke(2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER,
          10f, new float[] {6f, 4f}, 0f));
    }
    return chart;
  }

  static XYChart byConcurrency(ColdStartResult r, String suffix) throws NotDrawn {
    ColdStartResult.Concurrency c = r.concurrency();
    if (c.levels().isEmpty()) {
      throw new NotDrawn(c.skipped() == null ? "no level ran" : c.skipped());
    }
    double[] n = c.levels().stream().mapToDouble(ColdStartResult.ConcurrencyLevel::concurrent).toArray();
    XYChart chart = new XYChartBuilder().width(WIDTH).height(HEIGHT)
        .title(c.model() + ": cold starts at once through the context pool" + suffix)
        .xAxisTitle(c.onePerGpu() ? "cold starts at once, one per GPU" : "cold starts at once on one GPU")
        .yAxisTitle("milliseconds").build();
    style(chart.getStyler());
    chart.getStyler().setXAxisDecimalPattern("#");
    chart.addSeries("median time to first response", n,
        c.levels().stream().mapToDouble(ColdStartResult.ConcurrencyLevel::median).toArray())
        .setMarker(SeriesMarkers.CIRCLE);
    chart.addSeries("the last to answer", n,
        c.levels().stream().mapToDouble(ColdStartResult.ConcurrencyLevel::last).toArray())
        .setMarker(SeriesMarkers.SQUARE);
    Double gbps = r.environment().h2dGBps();
    if (gbps != null && c.imageBytes() != null) {
      XYSeries floor = chart.addSeries(String.format(Locale.ROOT, c.onePerGpu()
          ? "PCIe floor (image / %.1f GB/s: each GPU its own link)" : "PCIe floor (N × image / %.1f GB/s)", gbps), n,
          Arrays.stream(n).map(k -> (c.onePerGpu() ? 1 : k) * c.imageBytes() / (gbps * 1e6)).toArray());
      floor.setMarker(SeriesMarkers.NONE);
      floor.setLineStyle(new BasicStroke(2f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER,
          10f, new float[] {6f, 4f}, 0f));
    }
    return chart;
  }

  private static boolean sweeps(String id) {
    return Contenders.all().stream().anyMatch(c -> c.id().equals(id) && c.sweeps());
  }

  static XYChart timeline(ChromeTrace trace, String suffix) throws NotDrawn {
    if (trace.spans().isEmpty()) {
      throw new NotDrawn("the trace holds no complete events");
    }
    List<String> lanes = trace.lanes();
    XYChart chart = new XYChartBuilder().width(WIDTH).height(Math.max(HEIGHT * 2 / 3, 200 + 40 * lanes.size()))
        .title("Restore timeline: " + trace.source() + suffix).xAxisTitle("milliseconds from the first event").build();
    style(chart.getStyler());
    chart.getStyler().setYAxisMin(-1.0).setYAxisMax((double) lanes.size());
    chart.getStyler().setYAxisTickMarkSpacingHint(20);
    chart.setXAxisTitle("milliseconds from the first event; lanes from the bottom: " + String.join(", ", lanes));
    chart.getStyler().setYAxisTicksVisible(false);
    chart.setCustomYAxisTickLabelsFormatter(v -> {
      long i = Math.round(v);
      return Math.abs(v - i) < 1e-9 && i >= 0 && i < lanes.size() ? lanes.get((int) i) : " ";
    });
    Color[] palette = {new Color(0x1f77b4), new Color(0xff7f0e),
        new Color(0x2ca02c), new Color(0xd62728), new Color(0x9467bd),
        new Color(0x8c564b), new Color(0xe377c2), new Color(0x7f7f7f),
        new Color(0xbcbd22), new Color(0x17becf)};
    // Colour by name when names are few (a server's phases); else by category, else by lane (an on-demand
    // restore's hundreds of copies and kernels), and then without a legend.
    long names = trace.spans().stream().map(ChromeTrace.Span::name).distinct().count();
    long categories = trace.spans().stream().map(ChromeTrace.Span::category).distinct().count();
    Function<ChromeTrace.Span, String> key = names <= palette.length ? ChromeTrace.Span::name
        : categories <= palette.length ? ChromeTrace.Span::category : ChromeTrace.Span::lane;
    boolean legend = names <= palette.length || categories <= palette.length;
    chart.getStyler().setLegendVisible(legend);
    Map<String, Color> colours = new LinkedHashMap<>();
    Set<String> named = new LinkedHashSet<>();
    int n = 0;
    for (ChromeTrace.Span s : trace.spans()) {
      String k = key.apply(s);
      Color color = colours.computeIfAbsent(k, x -> palette[colours.size() % palette.length]);
      double lane = lanes.indexOf(s.lane());
      // One legend entry per colour: the first span of it carries the name, the others stay out of the legend.
      boolean first = named.add(k);
      XYSeries series = chart.addSeries(first ? k : " " + n++, new double[] {s.startMillis(), s.endMillis()},
          new double[] {lane, lane});
      series.setShowInLegend(first);
      series.setMarker(SeriesMarkers.NONE);
      series.setLineColor(color);
      series.setLineStyle(new BasicStroke(14f, BasicStroke.CAP_BUTT, BasicStroke.JOIN_MITER));
    }
    return chart;
  }

  /**
   * Gives the SVG its chart's title as a {@code <title>} element: VectorGraphics2D draws text as outlines, so
   * without it no tool (nor a reader of the file) could find the words, SIMULATED among them.
   */
  private static void titleSvg(Path svg, String title) throws IOException {
    String text = Files.readString(svg);
    int open = text.indexOf("<svg");
    int end = open < 0 ? -1 : text.indexOf('>', open);
    if (end < 0) {
      throw new IOException(svg + " has no <svg> element");
    }
    String escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;");
    Files.writeString(svg, text.substring(0, end + 1) + "\n  <title>" + escaped + "</title>" + text.substring(end + 1));
  }

  private static double[] column(double[][] points, int i) {
    double[] c = new double[points.length];
    for (int j = 0; j < points.length; j++) {
      c[j] = points[j][i];
    }
    return c;
  }

  private static void style(AxesChartStyler s) {
    s.setLegendPosition(Styler.LegendPosition.OutsideS);
    s.setChartBackgroundColor(Color.WHITE);
    s.setPlotGridLinesVisible(true);
    s.setToolTipsEnabled(false);
  }
}
