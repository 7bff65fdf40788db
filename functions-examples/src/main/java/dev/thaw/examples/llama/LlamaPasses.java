package dev.thaw.examples.llama;

import dev.thaw.examples.function.SessionModule;
import dev.thaw.examples.function.TokenModel;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.examples.llama.kernels.LlamaKernels.Epilogue;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuStream;

/**
 * A Llama's passes over rows of its io buffers, with every address it uses resolved once: the prompt pass and the
 * decode step of {@link LlamaFunction} (one request alone) and of its {@link dev.thaw.examples.function.TokenEngine}
 * (requests batched), on the session's stream; and the same passes of one rank of a tensor-parallel group
 * ({@link LlamaTensorParallel}), on that rank's stream over its {@link LlamaShard}'s widths. Addresses never change in
 * a session's (or a rank's) life, so an engine resolves them once for all its passes.
 *
 * <p>Without an {@link Exchange} (one device) the o and down products add into the residual stream
 * ({@link Epilogue#RESIDUAL}) and the head scores the whole vocabulary. With one, each of those products writes this
 * rank's partial sum ({@link Epilogue#FLOAT}) and the exchange adds every rank's partial to the residual stream, the
 * attention's and the MLP's alternately in two buffers; the head scores the rank's vocabulary slice and the exchange
 * gathers the whole row, so every rank picks the same token.
 */
final class LlamaPasses implements TokenModel {

  /**
   * How a rank of a tensor-parallel group meets the others: called from the rank's issuing thread, in the same order
   * on every rank.
   */
  interface Exchange {
    /** This rank's partial buffer {@code which} (0: attention's, 1: the MLP's): fp32, a pass's rows × hidden. */
    long partial(int which);

    /** Adds every rank's partial {@code which} ({@code elements} floats) to {@code x}, this rank's residual. */
    void allReduce(int which, long x, long elements);

    /** This rank's buffer for its vocabulary slice of the logits: fp32 [rows, slice]. */
    long logitSlice();

    /** Gathers every rank's slice into {@code logits}, fp32 [rows, vocab] of this rank. */
    void gatherLogits(long logits, int rows, int vocab);
  }

  private final LlamaFunction.State s;
  private final LlamaKernels k;
  private final LlamaShard shard;
  private final Exchange exchange;
  private final GpuStream stream;
  private final LlamaConfig cfg;
  private final float scale;
  private final long embed;
  private final long lmHead;
  private final long finalNorm;
  private final Layer[] layers;
  private final long tokens;
  private final long positions;
  private final long cacheRows;
  private final long invFreq;
  private final long x;
  private final long h;
  private final long qkv;
  private final long attn;
  private final long attnPartial;
  private final long gateUp;
  private final long act;
  private final long last;
  private final long logits;

  /** A layer's weight and cache addresses; qkvBias is 0 without biases. */
  private record Layer(long inNorm, long qkv, long qkvBias, long o, long postNorm, long gateUp, long down,
      long kCache, long vCache) {}

  LlamaPasses(FunctionSession session, LlamaFunction.State s) {
    this(LlamaMemory.of(session), new LlamaKernels(new SessionModule(session, s.module(), LlamaKernels.EMBED),
        s.config().type(), session.context().device()), session.stream(), s, new LlamaShard(s.config(), 0, 1), null);
  }

  /**
   * The passes of {@code shard}'s rank over its buffers in {@code memory}, launching {@code k} on {@code stream}; with
   * {@code exchange} null, of a whole model on one device (a shard of one rank).
   */
  LlamaPasses(LlamaMemory memory, LlamaKernels k, GpuStream stream, LlamaFunction.State s, LlamaShard shard,
      Exchange exchange) {
    if (exchange == null && shard.ranks() != 1) {
      throw new IllegalArgumentException("rank " + shard.rank() + " of " + shard.ranks() + " needs an exchange");
    }
    this.s = s;
    this.cfg = s.config();
    this.k = k;
    this.shard = shard;
    this.exchange = exchange;
    this.stream = stream;
    this.scale = (float) (1.0 / Math.sqrt(cfg.headDim()));
    this.embed = memory.address(new BufferRef("model.embed_tokens.weight"));
    // A tied head is the embedding: this rank's vocabulary rows of it.
    this.lmHead = cfg.tieEmbeddings() ? embed + 2L * shard.vocabStart() * cfg.hiddenSize()
        : memory.address(new BufferRef("lm_head.weight"));
    this.finalNorm = memory.address(new BufferRef("model.norm.weight"));
    this.layers = new Layer[cfg.layers()];
    for (int i = 0; i < layers.length; i++) {
      layers[i] = new Layer(memory.address(new BufferRef(LlamaTensor.layer(i, "input_layernorm.weight"))),
          memory.address(new BufferRef(LlamaFunction.qkvWeight(i))),
          cfg.qkvBias() ? memory.address(new BufferRef(LlamaFunction.qkvBias(i))) : 0,
          memory.address(new BufferRef(LlamaTensor.layer(i, "self_attn.o_proj.weight"))),
          memory.address(new BufferRef(LlamaTensor.layer(i, "post_attention_layernorm.weight"))),
          memory.address(new BufferRef(LlamaFunction.gateUpWeight(i))),
          memory.address(new BufferRef(LlamaTensor.layer(i, "mlp.down_proj.weight"))),
          memory.address(s.kCache().get(i)), memory.address(s.vCache().get(i)));
    }
    LlamaFunction.Scratch sc = s.scratch();
    this.tokens = memory.address(sc.tokens());
    this.positions = memory.address(sc.positions());
    this.cacheRows = memory.address(sc.cacheRows());
    this.invFreq = memory.address(sc.invFreq());
    this.x = memory.address(sc.x());
    this.h = memory.address(sc.h());
    this.qkv = memory.address(sc.qkv());
    this.attn = memory.address(sc.attn());
    this.attnPartial = memory.address(sc.attnPartial());
    this.gateUp = memory.address(sc.gateUp());
    this.act = memory.address(sc.act());
    this.last = memory.address(sc.last());
    this.logits = memory.address(sc.logits());
  }

  // ---- TokenModel ----

  @Override
  public int slots() {
    return s.maxBatch();
  }

  @Override
  public int maxTokens() {
    return s.maxTokens();
  }

  @Override
  public int vocab() {
    return cfg.vocabSize();
  }

  @Override
  public BufferRef tokens() {
    return s.scratch().tokens();
  }

  @Override
  public BufferRef positions() {
    return s.scratch().positions();
  }

  @Override
  public BufferRef cacheRows() {
    return s.scratch().cacheRows();
  }

  @Override
  public BufferRef logits() {
    return s.scratch().logits();
  }

  @Override
  public void forward(int rows, int decodeKeys) {
    forward(rows, 0, 0, 0, decodeKeys);
  }

  // ---- the kernels ----

  /**
   * One pass over {@code rows} rows whose token ids, positions and cache rows start at these byte offsets of the io
   * buffers: a prompt pass when {@code decodeKeys} is 0, else a decode step (one row per sequence) in which no row
   * attends to more than {@code decodeKeys} positions.
   */
  void forward(int rows, long tokAt, long posAt, long cacheRowAt, int decodeKeys) {
    long tok = tokens + tokAt;
    long pos = positions + posAt;
    long cacheRow = cacheRows + cacheRowAt;
    int c = cfg.hiddenSize();
    int hq = shard.heads();
    int hkv = shard.kvHeads();
    int d = cfg.headDim();
    int inter = shard.intermediateSize();
    int maxT = s.maxTokens();
    float eps = cfg.rmsNormEps();
    boolean flash = LlamaFunction.flashPrefill(cfg);
    int splits = decodeKeys > 0 ? LlamaKernels.decodeSplits(decodeKeys, rows, hq, hkv) : 0;
    k.embed(stream, embed, tok, x, rows, c, cfg.vocabSize());
    for (Layer l : layers) {
      k.rmsnorm(stream, x, l.inNorm(), h, rows, c, eps);
      k.linear(stream, h, l.qkv(), l.qkvBias(), qkv, rows, shard.qkvWidth(), c, Epilogue.STORE);
      k.ropeKv(stream, qkv, l.kCache(), l.vCache(), invFreq, pos, cacheRow, rows, hq, hkv, d, maxT);
      if (decodeKeys > 0) {
        k.flashDecode(stream, qkv, l.kCache(), l.vCache(), attnPartial, attn, pos, cacheRow, rows, hq, hkv, d,
            maxT, scale, splits);
      } else if (flash) {
        k.flashAttention(stream, qkv, l.kCache(), l.vCache(), attn, pos, cacheRow, rows, hq, hkv, d, maxT, scale);
      } else {
        k.attention(stream, qkv, l.kCache(), l.vCache(), attn, pos, cacheRow, rows, hq, hkv, d, maxT, scale);
      }
      addToResidual(attn, l.o(), rows, shard.attentionWidth(), 0);
      k.rmsnorm(stream, x, l.postNorm(), h, rows, c, eps);
      if (rows > LlamaKernels.GEMV_MAX_ROWS) {
        k.linear(stream, h, l.gateUp(), 0, act, rows, 2 * inter, c, Epilogue.SWIGLU);
      } else {
        k.linear(stream, h, l.gateUp(), 0, gateUp, rows, 2 * inter, c, Epilogue.STORE);
        k.swiglu(stream, gateUp, act, rows, inter);
      }
      addToResidual(act, l.down(), rows, inter, 1);
    }
  }

  /**
   * {@code x += in W^T} over this rank's K columns: in place on one device; else into this rank's partial
   * {@code which}, whose sum over the ranks the exchange adds to x.
   */
  private void addToResidual(long in, long w, int rows, int K, int which) {
    int c = cfg.hiddenSize();
    if (exchange == null) {
      k.linear(stream, in, w, 0, x, rows, c, K, Epilogue.RESIDUAL);
    } else {
      k.linear(stream, in, w, 0, exchange.partial(which), rows, c, K, Epilogue.FLOAT);
      exchange.allReduce(which, x, (long) rows * c);
    }
  }

  /** The final norm of {@code n} rows of {@code x} from row {@code row} into rows of {@code last} from {@code into}. */
  @Override
  public void finalNorm(int row, int into, int n) {
    int c = cfg.hiddenSize();
    k.rmsnorm(stream, x + 4L * c * row, finalNorm, last + 2L * c * into, n, c, cfg.rmsNormEps());
  }

  /**
   * Logits of the first {@code n} rows of {@code last}, their argmax into the tokens buffer at byte {@code idsAt}; a
   * rank scores its vocabulary slice and gathers the whole rows before the argmax.
   */
  @Override
  public void head(int n, long idsAt) {
    if (exchange == null) {
      k.linear(stream, last, lmHead, 0, logits, n, cfg.vocabSize(), cfg.hiddenSize(), Epilogue.FLOAT);
    } else {
      k.linear(stream, last, lmHead, 0, exchange.logitSlice(), n, shard.vocabWidth(), cfg.hiddenSize(),
          Epilogue.FLOAT);
      exchange.gatherLogits(logits, n, cfg.vocabSize());
    }
    k.argmax(stream, logits, tokens + idsAt, n, cfg.vocabSize());
  }
}
