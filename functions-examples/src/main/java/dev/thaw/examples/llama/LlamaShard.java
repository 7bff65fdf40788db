package dev.thaw.examples.llama;

import dev.thaw.examples.collective.CollectiveKernels;
import dev.thaw.runtime.function.InvalidConfigException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What rank {@code rank} of a tensor-parallel group of {@code ranks} holds of a Llama-family model, split as Megatron
 * splits it: the q, k, v and gate, up projections by output rows (column-parallel: each rank computes its heads and its
 * share of the MLP width), the o and down projections by input columns (row-parallel: each rank's product is a partial
 * sum of the layer's output, all-reduced into the residual stream), the LM head by vocabulary rows (each rank scores
 * its slice of the vocabulary; the slices are gathered). The embedding and the norms are replicated, and so is the
 * residual stream: every rank adds the same all-reduced sums, in the same order, to the same values.
 *
 * <p>Rank r's heads are query heads [r Hq/n, (r+1) Hq/n) and key-value heads [r Hkv/n, (r+1) Hkv/n): with Hq/Hkv query
 * heads per key-value head, a rank's query heads read only its own key-value heads, so attention needs no exchange.
 * Its vocabulary slice is [V r/n, V (r+1)/n) ({@link CollectiveKernels#sliceStart}), which need not be even.
 *
 * @param config the whole model's shape
 */
public record LlamaShard(LlamaConfig config, int rank, int ranks) {

  public LlamaShard {
    check(config, ranks);
    if (rank < 0 || rank >= ranks) {
      throw new IllegalArgumentException("rank " + rank + " of " + ranks);
    }
  }

  /**
   * Refuses a split the kernels cannot run, naming the dimension: more ranks than {@link CollectiveKernels#MAX_RANKS},
   * a head count or MLP width that {@code ranks} does not divide, or a rank's attention or MLP width that is not a
   * multiple of the products' K step.
   *
   * @throws InvalidConfigException saying what does not split
   */
  public static void check(LlamaConfig c, int ranks) {
    if (ranks < 1 || ranks > CollectiveKernels.MAX_RANKS) {
      throw new InvalidConfigException("tensor parallelism must be 1 to " + CollectiveKernels.MAX_RANKS + " ranks, not "
          + ranks);
    }
    divides("num_attention_heads", c.heads(), ranks);
    divides("num_key_value_heads", c.kvHeads(), ranks);
    divides("intermediate_size", c.intermediateSize(), ranks);
    multiple("num_attention_heads / ranks * head_dim", (long) c.heads() / ranks * c.headDim(), ranks);
    multiple("intermediate_size / ranks", c.intermediateSize() / ranks, ranks);
    if (c.vocabSize() < ranks) {
      throw new InvalidConfigException("vocab_size " + c.vocabSize() + " leaves a rank of " + ranks + " no token");
    }
  }

  private static void divides(String field, int value, int ranks) {
    if (value % ranks != 0) {
      throw new InvalidConfigException(field + " = " + value + " does not split over " + ranks + " ranks: "
          + "tensor parallelism must divide it");
    }
  }

  private static void multiple(String what, long value, int ranks) {
    if (value % LlamaConfig.K_MULTIPLE != 0) {
      throw new InvalidConfigException(what + " = " + value + " at " + ranks + " ranks is not a multiple of "
          + LlamaConfig.K_MULTIPLE + " (the products' K step): use fewer ranks");
    }
  }

  /** This rank's query heads. */
  public int heads() {
    return config.heads() / ranks;
  }

  /** This rank's key-value heads. */
  public int kvHeads() {
    return config.kvHeads() / ranks;
  }

  /** This rank's share of the MLP width. */
  public int intermediateSize() {
    return config.intermediateSize() / ranks;
  }

  /** Width of this rank's fused q | k | v row. */
  public int qkvWidth() {
    return (heads() + 2 * kvHeads()) * config.headDim();
  }

  /** Width of this rank's attention output: the K of its o product. */
  public int attentionWidth() {
    return heads() * config.headDim();
  }

  /** The first token of this rank's vocabulary slice. */
  public int vocabStart() {
    return CollectiveKernels.sliceStart(config.vocabSize(), rank, ranks);
  }

  /** Tokens in this rank's vocabulary slice. */
  public int vocabWidth() {
    return CollectiveKernels.sliceStart(config.vocabSize(), rank + 1, ranks) - vocabStart();
  }

  /**
   * A block of a checkpoint tensor, read as a matrix of its rows: rows [firstRow, firstRow + rows), columns
   * [firstColumn, firstColumn + columns) of {@code tensor} ([R, K] row-major; a vector is one row).
   */
  public record Piece(LlamaTensor tensor, long firstRow, long rows, long firstColumn, long columns) {

    /** Columns of the whole tensor: its last dimension (a vector is one row of them). */
    public long tensorColumns() {
      long[] s = tensor.shape();
      return s[s.length - 1];
    }

    /** True when the block is one run of the tensor's bytes. */
    public boolean contiguous() {
      return columns == tensorColumns() || rows == 1;
    }

    public long bytes() {
      return 2 * rows * columns;
    }
  }

  /** A device buffer of this rank and the pieces laid end to end in it. */
  public record Weight(String name, List<Piece> pieces) {
    public long bytes() {
      return pieces.stream().mapToLong(Piece::bytes).sum();
    }
  }

  /**
   * This rank's weight buffers, in upload order, with the names a single-device {@link LlamaFunction} gives the whole
   * tensors: the embedding and norms whole; {@code qkv_proj} the rank's q rows | k rows | v rows (bias likewise);
   * {@code o_proj} the rank's columns; {@code gate_up_proj} its gate rows | up rows; {@code down_proj} its columns;
   * {@code lm_head} its vocabulary rows (none when tied: the head reads those rows of the embedding).
   */
  public List<Weight> weights() {
    Map<String, LlamaTensor> byName = new LinkedHashMap<>();
    for (LlamaTensor t : LlamaTensor.all(config)) {
      byName.put(t.name(), t);
    }
    long d = config.headDim();
    long q0 = rank * heads() * d;
    long qn = heads() * d;
    long kv0 = rank * kvHeads() * d;
    long kvn = kvHeads() * d;
    long i0 = (long) rank * intermediateSize();
    long in = intermediateSize();
    List<Weight> out = new ArrayList<>();
    out.add(whole(byName, "model.embed_tokens.weight"));
    for (int i = 0; i < config.layers(); i++) {
      out.add(whole(byName, LlamaTensor.layer(i, "input_layernorm.weight")));
      out.add(new Weight(LlamaFunction.qkvWeight(i), List.of(rows(byName, i, "self_attn.q_proj.weight", q0, qn),
          rows(byName, i, "self_attn.k_proj.weight", kv0, kvn), rows(byName, i, "self_attn.v_proj.weight", kv0, kvn))));
      if (config.qkvBias()) {
        out.add(new Weight(LlamaFunction.qkvBias(i), List.of(span(byName, i, "self_attn.q_proj.bias", q0, qn),
            span(byName, i, "self_attn.k_proj.bias", kv0, kvn), span(byName, i, "self_attn.v_proj.bias", kv0, kvn))));
      }
      out.add(new Weight(LlamaTensor.layer(i, "self_attn.o_proj.weight"),
          List.of(columns(byName, i, "self_attn.o_proj.weight", q0, qn))));
      out.add(whole(byName, LlamaTensor.layer(i, "post_attention_layernorm.weight")));
      out.add(new Weight(LlamaFunction.gateUpWeight(i), List.of(rows(byName, i, "mlp.gate_proj.weight", i0, in),
          rows(byName, i, "mlp.up_proj.weight", i0, in))));
      out.add(new Weight(LlamaTensor.layer(i, "mlp.down_proj.weight"),
          List.of(columns(byName, i, "mlp.down_proj.weight", i0, in))));
    }
    out.add(whole(byName, "model.norm.weight"));
    if (!config.tieEmbeddings()) {
      LlamaTensor head = byName.get("lm_head.weight");
      out.add(new Weight(head.name(), List.of(new Piece(head, vocabStart(), vocabWidth(), 0, config.hiddenSize()))));
    }
    return List.copyOf(out);
  }

  private static Weight whole(Map<String, LlamaTensor> byName, String name) {
    LlamaTensor t = byName.get(name);
    long[] s = t.shape();
    long columns = s[s.length - 1];
    return new Weight(name, List.of(new Piece(t, 0, t.elements() / columns, 0, columns)));
  }

  private static Piece rows(Map<String, LlamaTensor> byName, int layer, String suffix, long first, long count) {
    LlamaTensor t = byName.get(LlamaTensor.layer(layer, suffix));
    return new Piece(t, first, count, 0, t.shape()[1]);
  }

  private static Piece columns(Map<String, LlamaTensor> byName, int layer, String suffix, long first, long count) {
    LlamaTensor t = byName.get(LlamaTensor.layer(layer, suffix));
    return new Piece(t, 0, t.shape()[0], first, count);
  }

  /** Elements [first, first + count) of a vector. */
  private static Piece span(Map<String, LlamaTensor> byName, int layer, String suffix, long first, long count) {
    LlamaTensor t = byName.get(LlamaTensor.layer(layer, suffix));
    return new Piece(t, 0, 1, first, count);
  }
}
