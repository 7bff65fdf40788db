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
 * (requests batched), on the session's stream. Addresses never change in a session's life, so an engine resolves them
 * once for all its passes.
 */
final class LlamaPasses implements TokenModel {

  private final LlamaFunction.State s;
  private final LlamaKernels k;
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
    this.s = s;
    this.cfg = s.config();
    this.k = new LlamaKernels(new SessionModule(session, s.module(), LlamaKernels.EMBED), cfg.type(),
        session.context().device());
    this.stream = session.stream();
    this.scale = (float) (1.0 / Math.sqrt(cfg.headDim()));
    this.embed = session.address(new BufferRef("model.embed_tokens.weight"));
    this.lmHead = cfg.tieEmbeddings() ? embed : session.address(new BufferRef("lm_head.weight"));
    this.finalNorm = session.address(new BufferRef("model.norm.weight"));
    this.layers = new Layer[cfg.layers()];
    for (int i = 0; i < layers.length; i++) {
      layers[i] = new Layer(session.address(new BufferRef(LlamaTensor.layer(i, "input_layernorm.weight"))),
          session.address(new BufferRef(LlamaFunction.qkvWeight(i))),
          cfg.qkvBias() ? session.address(new BufferRef(LlamaFunction.qkvBias(i))) : 0,
          session.address(new BufferRef(LlamaTensor.layer(i, "self_attn.o_proj.weight"))),
          session.address(new BufferRef(LlamaTensor.layer(i, "post_attention_layernorm.weight"))),
          session.address(new BufferRef(LlamaFunction.gateUpWeight(i))),
          session.address(new BufferRef(LlamaTensor.layer(i, "mlp.down_proj.weight"))),
          session.address(s.kCache().get(i)), session.address(s.vCache().get(i)));
    }
    LlamaFunction.Scratch sc = s.scratch();
    this.tokens = session.address(sc.tokens());
    this.positions = session.address(sc.positions());
    this.cacheRows = session.address(sc.cacheRows());
    this.invFreq = session.address(sc.invFreq());
    this.x = session.address(sc.x());
    this.h = session.address(sc.h());
    this.qkv = session.address(sc.qkv());
    this.attn = session.address(sc.attn());
    this.attnPartial = session.address(sc.attnPartial());
    this.gateUp = session.address(sc.gateUp());
    this.act = session.address(sc.act());
    this.last = session.address(sc.last());
    this.logits = session.address(sc.logits());
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
    int hq = cfg.heads();
    int hkv = cfg.kvHeads();
    int d = cfg.headDim();
    int inter = cfg.intermediateSize();
    int maxT = s.maxTokens();
    float eps = cfg.rmsNormEps();
    boolean flash = LlamaFunction.flashPrefill(cfg);
    int splits = decodeKeys > 0 ? LlamaKernels.decodeSplits(decodeKeys, rows, hq, hkv) : 0;
    k.embed(stream, embed, tok, x, rows, c, cfg.vocabSize());
    for (Layer l : layers) {
      k.rmsnorm(stream, x, l.inNorm(), h, rows, c, eps);
      k.linear(stream, h, l.qkv(), l.qkvBias(), qkv, rows, cfg.qkvWidth(), c, Epilogue.STORE);
      k.ropeKv(stream, qkv, l.kCache(), l.vCache(), invFreq, pos, cacheRow, rows, hq, hkv, d, maxT);
      if (decodeKeys > 0) {
        k.flashDecode(stream, qkv, l.kCache(), l.vCache(), attnPartial, attn, pos, cacheRow, rows, hq, hkv, d,
            maxT, scale, splits);
      } else if (flash) {
        k.flashAttention(stream, qkv, l.kCache(), l.vCache(), attn, pos, cacheRow, rows, hq, hkv, d, maxT, scale);
      } else {
        k.attention(stream, qkv, l.kCache(), l.vCache(), attn, pos, cacheRow, rows, hq, hkv, d, maxT, scale);
      }
      k.linear(stream, attn, l.o(), 0, x, rows, c, cfg.attentionWidth(), Epilogue.RESIDUAL);
      k.rmsnorm(stream, x, l.postNorm(), h, rows, c, eps);
      if (rows > LlamaKernels.GEMV_MAX_ROWS) {
        k.linear(stream, h, l.gateUp(), 0, act, rows, 2 * inter, c, Epilogue.SWIGLU);
      } else {
        k.linear(stream, h, l.gateUp(), 0, gateUp, rows, 2 * inter, c, Epilogue.STORE);
        k.swiglu(stream, gateUp, act, rows, inter);
      }
      k.linear(stream, act, l.down(), 0, x, rows, c, inter, Epilogue.RESIDUAL);
    }
  }

  /** The final norm of {@code n} rows of {@code x} from row {@code row} into rows of {@code last} from {@code into}. */
  @Override
  public void finalNorm(int row, int into, int n) {
    int c = cfg.hiddenSize();
    k.rmsnorm(stream, x + 4L * c * row, finalNorm, last + 2L * c * into, n, c, cfg.rmsNormEps());
  }

  /** Logits of the first {@code n} rows of {@code last}, their argmax into the tokens buffer at byte {@code idsAt}. */
  @Override
  public void head(int n, long idsAt) {
    k.linear(stream, last, lmHead, 0, logits, n, cfg.vocabSize(), cfg.hiddenSize(), Epilogue.FLOAT);
    k.argmax(stream, logits, tokens + idsAt, n, cfg.vocabSize());
  }
}
