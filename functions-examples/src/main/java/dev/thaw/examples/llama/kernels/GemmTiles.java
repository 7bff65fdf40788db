package dev.thaw.examples.llama.kernels;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.examples.llama.kernels.LlamaKernels.GemmTile;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Which {@link GemmTile} {@link LlamaKernels#linear} launches for a product of M rows (above
 * {@link LlamaKernels#GEMV_MAX_ROWS}) and N columns: an ordered list of rules, the first that holds wins. A rule
 * holds when M is at least its {@code fromRows} and its tile makes at least {@code minWaves} blocks per SM (a
 * tile of few blocks leaves SMs idle, a tile taller than M computes rows of zeros). The last rule holds for every
 * M. The rules are data ({@link #RESOURCE}), set from the GPU's measurements of every tile at every product
 * shape: {@code scripts/llama/kernels_summary.py} prints the winners and rules fitted to them.
 */
public final class GemmTiles {

  /** The classpath resource with the rules of both modules. */
  public static final String RESOURCE = "/dev/thaw/examples/llama/gemm-tiles.json";

  /** One rule: {@code tile} when M >= fromRows and its blocks >= minWaves x SMs. */
  public record Rule(GemmTile tile, int fromRows, double minWaves) {

    boolean holds(int M, int N, Epilogue e, int multiprocessors) {
      return M >= fromRows && tile.blocks(M, N, e) >= minWaves * multiprocessors;
    }
  }

  private static final GemmTiles MMA_SYNC = load("mma.sync", false);
  private static final GemmTiles WGMMA = load("wgmma", true);

  private final List<Rule> rules;

  private GemmTiles(List<Rule> rules) {
    this.rules = List.copyOf(rules);
  }

  /** The rules of {@link #RESOURCE} for the sm_90a module ({@code wgmma}) or the compute_80 one. */
  public static GemmTiles defaults(boolean wgmma) {
    return wgmma ? WGMMA : MMA_SYNC;
  }

  /**
   * Rules from a JSON array of {@code {"tile": entry, "fromRows": n, "minWaves": w}}.
   *
   * @throws IllegalArgumentException naming the rule that is wrong: an unknown tile, a wgmma tile where
   *     {@code wgmma} is false, a negative or non-numeric threshold, or a last rule that does not hold for every M
   */
  public static GemmTiles parse(JsonNode array, boolean wgmma) {
    if (array == null || !array.isArray() || array.isEmpty()) {
      throw new IllegalArgumentException("product tile rules are a non-empty JSON array, not " + array);
    }
    List<Rule> rules = new ArrayList<>();
    for (JsonNode r : array) {
      JsonNode tile = r.get("tile");
      JsonNode from = r.get("fromRows");
      JsonNode waves = r.get("minWaves");
      if (tile == null || !tile.isTextual() || from == null || !from.canConvertToInt() || !from.isIntegralNumber()
          || waves == null || !waves.isNumber() || from.asInt() < 0 || !(waves.asDouble() >= 0)
          || Double.isInfinite(waves.asDouble())) {
        throw new IllegalArgumentException("a rule is {\"tile\": entry, \"fromRows\": n >= 0, \"minWaves\": w >= 0},"
            + " not " + r);
      }
      GemmTile t = GemmTile.of(tile.asText());
      if (t.wgmma() && !wgmma) {
        throw new IllegalArgumentException(t.entry() + " is a wgmma product: not in the rules of the compute_80 "
            + "module");
      }
      rules.add(new Rule(t, from.asInt(), waves.asDouble()));
    }
    Rule last = rules.get(rules.size() - 1);
    if (last.fromRows() > LlamaKernels.GEMV_MAX_ROWS + 1 || last.minWaves() > 0) {
      throw new IllegalArgumentException("the last rule must hold for every M above " + LlamaKernels.GEMV_MAX_ROWS
          + " (fromRows <= " + (LlamaKernels.GEMV_MAX_ROWS + 1) + ", minWaves 0): " + last);
    }
    return new GemmTiles(rules);
  }

  public List<Rule> rules() {
    return rules;
  }

  /** The tile of the first rule that holds. */
  public GemmTile pick(int M, int N, Epilogue e, int multiprocessors) {
    for (Rule r : rules) {
      if (r.holds(M, N, e, multiprocessors)) {
        return r.tile();
      }
    }
    return rules.get(rules.size() - 1).tile();
  }

  private static GemmTiles load(String key, boolean wgmma) {
    try (InputStream in = GemmTiles.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(RESOURCE + " is missing from the classpath");
      }
      return parse(new ObjectMapper().readTree(in).get(key), wgmma);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public String toString() {
    return rules.toString();
  }
}
