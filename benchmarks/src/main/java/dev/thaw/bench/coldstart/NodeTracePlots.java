package dev.thaw.bench.coldstart;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.CategoryChart;
import org.knowm.xchart.CategoryChartBuilder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.markers.SeriesMarkers;

/**
 * The node trace's plots, PNG only (an SVG of hundreds of points is a megabyte, and the repository travels to the GPU
 * hosts): the distribution of cold-start times per policy, and where cold starts began per policy.
 */
final class NodeTracePlots {

  private static final List<String> TIERS = List.of("hbm", "host-cache", "store");

  private NodeTracePlots() {}

  /** Draws into {@code dir}; returns the markdown lines that show them. */
  static List<String> render(JsonNode r, Path dir) throws IOException {
    System.setProperty("java.awt.headless", "true");
    Files.createDirectories(dir);
    String suffix = r.path("simulated").asBoolean() ? " (SIMULATED device)" : "";
    List<String> lines = new ArrayList<>();
    XYChart cdf = new XYChartBuilder().width(900).height(500).title("Cold starts' time to first response" + suffix)
        .xAxisTitle("ms (log)").yAxisTitle("share of cold starts at most x").build();
    cdf.getStyler().setXAxisLogarithmic(true).setLegendPosition(Styler.LegendPosition.InsideSE);
    CategoryChart tiers = new CategoryChartBuilder().width(900).height(500)
        .title("Where cold starts began" + suffix).xAxisTitle("policy").yAxisTitle("cold starts").build();
    tiers.getStyler().setStacked(true);
    List<String> policies = new ArrayList<>();
    List<List<Number>> counts = new ArrayList<>();
    TIERS.forEach(t -> counts.add(new ArrayList<>()));
    for (Iterator<Map.Entry<String, JsonNode>> it = r.path("policies").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> p = it.next();
      List<Double> ms = new ArrayList<>();
      for (int i = 0; i < TIERS.size(); i++) {
        JsonNode c = p.getValue().path("coldByTier").path(TIERS.get(i));
        c.path("samples").forEach(v -> ms.add(v.asDouble()));
        counts.get(i).add(c.path("n").asInt());
      }
      policies.add(p.getKey());
      if (ms.isEmpty()) {
        continue;
      }
      ms.sort(Double::compare);
      double[] x = ms.stream().mapToDouble(Double::doubleValue).toArray();
      double[] y = new double[x.length];
      for (int i = 0; i < y.length; i++) {
        y[i] = (i + 1) / (double) y.length;
      }
      cdf.addSeries(p.getKey(), x, y).setMarker(SeriesMarkers.NONE);
    }
    if (!policies.isEmpty()) {
      for (int i = 0; i < TIERS.size(); i++) {
        tiers.addSeries(TIERS.get(i), policies, counts.get(i));
      }
      BitmapEncoder.saveBitmap(cdf, dir.resolve("node-trace-cold-cdf").toString(), BitmapEncoder.BitmapFormat.PNG);
      BitmapEncoder.saveBitmap(tiers, dir.resolve("node-trace-tiers").toString(), BitmapEncoder.BitmapFormat.PNG);
      lines.add("![Cold starts' time to first response](" + dir.getFileName() + "/node-trace-cold-cdf.png)");
      lines.add("![Where cold starts began](" + dir.getFileName() + "/node-trace-tiers.png)");
    }
    return lines;
  }
}
