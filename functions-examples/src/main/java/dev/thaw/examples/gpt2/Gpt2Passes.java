package dev.thaw.examples.gpt2;

import dev.thaw.examples.function.SessionModule;
import dev.thaw.examples.function.TokenModel;
import dev.thaw.examples.gpt2.kernels.Gpt2Kernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.gpu.GpuStream;

/**
 * GPT-2's passes over rows of its io buffers, with every address it uses resolved once: the prompt pass and the decode
 * step of {@link Gpt2Function} (one request alone) and of its {@link dev.thaw.examples.function.TokenEngine}
 * (requests batched), on the session's stream.
 */
final class Gpt2Passes implements TokenModel {

  private static final String[] LAYER_TENSORS = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
      "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
      "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

  private final Gpt2Function.State s;
  private final Gpt2Kernels k;
  private final GpuStream stream;
  private final int c;
  private final int h;
  private final int d;
  private final int vocab;
  private final float eps;
  private final float scale;
  private final long wte;
  private final long wpe;
  private final long[][] layers;
  private final long lnfW;
  private final long lnfB;
  private final long tokens;
  private final long positions;
  private final long cacheRows;
  private final long x;
  private final long ln;
  private final long qkv;
  private final long attn;
  private final long fc;
  private final long last;
  private final long logits;
  private final long[] kCache;
  private final long[] vCache;

  Gpt2Passes(FunctionSession session, Gpt2Function.State s) {
    this.s = s;
    this.k = new Gpt2Kernels(new SessionModule(session, s.module(), Gpt2Kernels.EMBED));
    this.stream = session.stream();
    Gpt2Config cfg = s.config();
    this.c = cfg.nEmbd();
    this.h = cfg.nHead();
    this.d = cfg.headSize();
    this.vocab = cfg.vocabSize();
    this.eps = cfg.layerNormEpsilon();
    this.scale = (float) (1.0 / Math.sqrt(d));
    this.wte = session.address(s.weight("wte.weight"));
    this.wpe = session.address(s.weight("wpe.weight"));
    this.layers = new long[cfg.nLayer()][LAYER_TENSORS.length];
    this.kCache = new long[cfg.nLayer()];
    this.vCache = new long[cfg.nLayer()];
    for (int i = 0; i < cfg.nLayer(); i++) {
      for (int j = 0; j < LAYER_TENSORS.length; j++) {
        layers[i][j] = session.address(s.layer(i, LAYER_TENSORS[j]));
      }
      kCache[i] = session.address(s.kCache().get(i));
      vCache[i] = session.address(s.vCache().get(i));
    }
    this.lnfW = session.address(s.weight("ln_f.weight"));
    this.lnfB = session.address(s.weight("ln_f.bias"));
    Gpt2Function.Scratch sc = s.scratch();
    this.tokens = session.address(sc.tokens());
    this.positions = session.address(sc.positions());
    this.cacheRows = session.address(sc.cacheRows());
    this.x = session.address(sc.x());
    this.ln = session.address(sc.ln());
    this.qkv = session.address(sc.qkv());
    this.attn = session.address(sc.attn());
    this.fc = session.address(sc.fc());
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
    return vocab;
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

  /** GPT-2's attention reads every row's keys up to its position whatever the pass: decodeKeys changes nothing. */
  /** GPT-2's attention reads every row's keys up to its position whatever the pass: decodeKeys changes nothing. */
  @Override
  public void forward(int rows, int decodeKeys) {
    forward(rows, 0, 0, 0);
  }

  // ---- the kernels ----

  /** One pass over {@code rows} rows whose token ids, positions and cache rows start at these byte offsets. */
  void forward(int rows, long tokAt, long posAt, long cacheRowAt) {
    long tok = tokens + tokAt;
    long pos = positions + posAt;
    long cacheRow = cacheRows + cacheRowAt;
    k.embed(stream, wte, wpe, tok, pos, x, rows, c);
    for (int i = 0; i < layers.length; i++) {
      long[] w = layers[i];
      k.layernorm(stream, x, w[0], w[1], ln, rows, c, eps);
      k.matmul(stream, ln, w[2], w[3], qkv, rows, 3 * c, c, false);
      k.kvAppend(stream, qkv, kCache[i], vCache[i], pos, cacheRow, rows, h, d, s.maxTokens());
      k.attention(stream, qkv, kCache[i], vCache[i], attn, pos, cacheRow, rows, h, d, s.maxTokens(), scale);
      k.matmulResidual(stream, attn, w[4], w[5], x, rows, c, c);
      k.layernorm(stream, x, w[6], w[7], ln, rows, c, eps);
      k.matmul(stream, ln, w[8], w[9], fc, rows, 4 * c, c, true);
      k.matmulResidual(stream, fc, w[10], w[11], x, rows, c, 4 * c);
    }
  }

  /** The final norm of {@code n} rows of {@code x} from row {@code row} into rows of {@code last} from {@code into}. */
  @Override
  public void finalNorm(int row, int into, int n) {
    k.layernorm(stream, x + 4L * c * row, lnfW, lnfB, last + 2L * c * into, n, c, eps);
  }

  /** Logits of the first {@code n} rows of {@code last}, their argmax into the tokens buffer at byte {@code idsAt}. */
  @Override
  public void head(int n, long idsAt) {
    k.lmHead(stream, last, wte, logits, n, vocab, c);
    k.argmax(stream, logits, tokens + idsAt, n, vocab);
  }
}
