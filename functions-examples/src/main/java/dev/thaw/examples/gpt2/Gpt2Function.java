package dev.thaw.examples.gpt2;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.Generation;
import dev.thaw.examples.function.Sampling;
import dev.thaw.examples.function.StagedUpload;
import dev.thaw.examples.function.TokenEngine;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.gpt2.kernels.Gpt2Kernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.TensorSpec;
import dev.thaw.runtime.function.ThawFunction;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Optional;
import java.util.Set;

/**
 * GPT-2 text generation: greedy decoding with a KV cache on the GPT-2 kernels ({@link Gpt2Kernels}).
 *
 * <h2>Config</h2>
 * <pre>{@code
 * {"model": "gpt2-large", "seed": 1}          // seeded random weights of a named size (Gpt2Config.names())
 * {"path": "/dir"}                            // a Hugging Face directory: config.json + model.safetensors
 *   "maxBatch": 4                             // sequences per request (default 4)
 *   "maxTokens": 1024                         // KV cache length: prompt + new tokens (default n_positions)
 * }</pre>
 * {@code init} loads the module, allocates each weight as a buffer named as in Hugging Face ({@code wte.weight},
 * {@code h.3.attn.c_attn.weight}, ...) and streams it up through pinned staging, allocates a KV cache of
 * maxBatch × maxTokens positions per layer ({@code kv.<layer>.k|v}) and activation scratch for maxBatch ×
 * maxTokens prompt rows ({@code act.*}, {@code io.*}), and runs one request to warm up.
 *
 * <h2>Requests</h2>
 * <pre>{@code
 * {"tokens": [[464, 2068, 7586], [15496, 11]], "maxNewTokens": 16, "returnLogits": false}
 * -> {"tokens": [[...16 ids...], [...16 ids...]], "logits": [[...V floats...], ...]}   // logits on request
 * }</pre>
 * Prompts may have different lengths: each sequence has its own positions (0..len-1) and cache row, so no
 * padding is needed. The prompt runs in one pass of M = Σ len rows; then each step runs one row per sequence.
 * {@code logits} are those of the last step: the one that chose the last token, or the prompt's last position
 * when {@code maxNewTokens} is 0. Everything about a request is checked before anything is launched, so an
 * {@link InvalidRequestException} leaves the device as it was.
 *
 * <h2>Serving</h2>
 * An instance serves up to maxBatch requests at once ({@link #concurrency}) through its
 * {@link dev.thaw.examples.function.TokenEngine} ({@link #engine}): every sequence in flight shares each decode step,
 * requests joining and leaving between steps, each in a KV-cache row of its own.
 */
public final class Gpt2Function implements ThawFunction<Gpt2Function.State> {

  public static final String MODULE = "gpt2";
  public static final int DEFAULT_MAX_BATCH = 4;
  public static final int DEFAULT_MAX_NEW_TOKENS = TokenRequest.DEFAULT_MAX_NEW_TOKENS;
  /** A bound on maxBatch: the KV cache and scratch grow with it, and the request loop is per sequence. */
  public static final int MAX_BATCH_LIMIT = 64;
  /** GPT-2's {@code <|endoftext|>}: a completion ends there. */
  static final int END_OF_TEXT = 50256;
  /** Pinned staging for the weight upload: two halves of this size, filled and copied alternately. */
  static final int STAGING_BYTES = 8 << 20;

  private static final Set<String> CONFIG_FIELDS = Set.of("model", "seed", "path", "maxBatch", "maxTokens");
  private static final Set<String> REQUEST_FIELDS = fields("tokens", "maxNewTokens", "returnLogits");

  /**
   * The host state: the model's shape, sizes, and references to every buffer (weights by their tensor names).
   *
   * @param weights where the weights came from (a path, or {@code seeded:<model>:<seed>})
   */
  public record State(Gpt2Config config, String weights, int maxBatch, int maxTokens, String module,
      Scratch scratch, List<BufferRef> kCache, List<BufferRef> vCache) {

    public State {
      kCache = List.copyOf(kCache);
      vCache = List.copyOf(vCache);
    }

    BufferRef weight(String name) {
      return new BufferRef(name);
    }

    BufferRef layer(int i, String suffix) {
      return new BufferRef(Gpt2Tensor.layer(i, suffix));
    }
  }

  /**
   * Per-request device memory. {@code tokens} holds the prompt rows and then each step's chosen ids
   * (step s of sequence b at prompt rows + s × batch + b), so a step reads its input where the previous
   * step's argmax wrote it and the host waits only once, at the end.
   */
  public record Scratch(BufferRef tokens, BufferRef positions, BufferRef cacheRows, BufferRef x, BufferRef ln,
      BufferRef qkv, BufferRef attn, BufferRef fc, BufferRef last, BufferRef logits) {}

  private static Set<String> fields(String... own) {
    Set<String> all = new HashSet<>(Set.of(own));
    all.addAll(Sampling.FIELDS);
    return Set.copyOf(all);
  }

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  /**
   * {@code tokens} INT32 [batch, prompt] in, {@code tokens} INT32 [batch, new] out; a language model on GPT-2's
   * byte-pair encoding ({@code r50k_base}), whose requests and responses are this function's own, sampling included;
   * a completion stops at {@code <|endoftext|>} when the vocabulary has it.
   */
  @Override
  public FunctionSignature signature(State s) {
    return new FunctionSignature(List.of(TensorSpec.of("tokens", "INT32", -1, -1)),
        List.of(TensorSpec.of("tokens", "INT32", -1, -1)),
        Optional.of(new FunctionSignature.LanguageModel("r50k_base", s.config().vocabSize(), s.maxTokens(),
            s.maxBatch(), null, s.config().vocabSize() > END_OF_TEXT ? List.of(END_OF_TEXT) : List.of(), true)));
  }

  // ---- init ----

  @Override
  public State init(FunctionSession session, JsonNode config) throws IOException {
    if (config == null || !config.isObject()) {
      throw new InvalidConfigException("the gpt2 config is a JSON object");
    }
    for (Iterator<String> it = config.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!CONFIG_FIELDS.contains(f)) {
        throw new InvalidConfigException("unknown config field '" + f + "'; known: " + CONFIG_FIELDS);
      }
    }
    try (Gpt2Weights weights = openWeights(config)) {
      Gpt2Config c = weights.config();
      int maxBatch = intSetting(config, "maxBatch", DEFAULT_MAX_BATCH, 1, MAX_BATCH_LIMIT);
      int maxTokens = intSetting(config, "maxTokens", c.nPositions(), 1, c.nPositions());
      session.loadModule(MODULE, Gpt2Kernels.ptx());
      List<Gpt2Tensor> tensors = Gpt2Tensor.all(c);
      for (Gpt2Tensor t : tensors) {
        session.allocate(t.name(), t.halfBytes());
      }
      upload(session, weights, tensors);

      long rows = (long) maxBatch * maxTokens;
      long cap = rows + maxBatch; // prompt rows, then one id per sequence per step (see Scratch)
      long cc = c.nEmbd();
      Scratch scratch = new Scratch(
          session.allocate("io.tokens", 4 * cap),
          session.allocate("io.positions", 4 * cap),
          session.allocate("io.cache_rows", 4 * cap),
          session.allocate("act.x", 4 * rows * cc),
          session.allocate("act.ln", 2 * rows * cc),
          session.allocate("act.qkv", 2 * rows * 3 * cc),
          session.allocate("act.attn", 2 * rows * cc),
          session.allocate("act.fc", 2 * rows * 4 * cc),
          session.allocate("act.last", 2L * maxBatch * cc),
          session.allocate("act.logits", 4L * maxBatch * c.vocabSize()));
      List<BufferRef> k = new ArrayList<>();
      List<BufferRef> v = new ArrayList<>();
      long cacheBytes = 2 * rows * cc; // [maxBatch, H, maxTokens, D] halves
      for (int i = 0; i < c.nLayer(); i++) {
        k.add(session.allocate("kv." + i + ".k", cacheBytes));
        v.add(session.allocate("kv." + i + ".v", cacheBytes));
      }
      State state = new State(c, weights.describe(), maxBatch, maxTokens, MODULE, scratch, k, v);
      warmUp(session, state);
      return state;
    }
  }

  private static Gpt2Weights openWeights(JsonNode config) throws IOException {
    JsonNode model = config.get("model");
    JsonNode path = config.get("path");
    if ((model == null) == (path == null)) {
      throw new InvalidConfigException("the config needs exactly one of 'model' (one of " + Gpt2Config.names()
          + ") and 'path' (a Hugging Face directory)");
    }
    if (path != null) {
      if (!path.isTextual() || path.asText().isEmpty()) {
        throw new InvalidConfigException("'path' must be a directory name, not " + path);
      }
      if (config.has("seed")) {
        throw new InvalidConfigException("'seed' goes with 'model', not with 'path'");
      }
      return HfCheckpoint.open(Path.of(path.asText()));
    }
    if (!model.isTextual()) {
      throw new InvalidConfigException("'model' must be a name, one of " + Gpt2Config.names());
    }
    JsonNode seed = config.path("seed");
    if (!seed.isMissingNode() && !(seed.isIntegralNumber() && seed.canConvertToLong())) {
      throw new InvalidConfigException("'seed' must be an integer, not " + seed);
    }
    return new SeededWeights(Gpt2Config.named(model.asText()), seed.asLong(1));
  }

  private static int intSetting(JsonNode config, String field, int fallback, int min, int max) {
    JsonNode v = config.get(field);
    if (v == null) {
      return fallback;
    }
    if (!v.isIntegralNumber() || !v.canConvertToInt() || v.asInt() < min || v.asInt() > max) {
      throw new InvalidConfigException("'" + field + "' must be an integer in [" + min + ", " + max + "], not " + v);
    }
    return v.asInt();
  }

  /**
   * Streams every tensor to its buffer through two pinned halves: while one half is copied, the next part
   * is read into the other. Refuses weights with an Inf or NaN: greedy decoding would turn one into an id
   * of -1, and the embedding kernel would read outside wte.
   */
  static void upload(FunctionSession session, Gpt2Weights weights, List<Gpt2Tensor> tensors) throws IOException {
    try (StagedUpload staging = new StagedUpload(session, STAGING_BYTES)) {
      for (Gpt2Tensor t : tensors) {
        staging.copy(session.address(new BufferRef(t.name())), t.halfBytes(), (at, view) -> {
          weights.read(t, at, view);
          checkFinite(t, view, at);
        });
      }
    }
  }

  private static void checkFinite(Gpt2Tensor t, ByteBuffer halves, long offset) {
    ByteBuffer b = halves.duplicate().order(ByteOrder.LITTLE_ENDIAN);
    int n = halves.capacity() / 2;
    for (int i = 0; i < n; i++) {
      if ((b.getShort(2 * i) & 0x7C00) == 0x7C00) {
        throw new InvalidConfigException("tensor '" + t.name() + "' has an Inf or NaN at element "
            + (offset / 2 + i));
      }
    }
  }

  private void warmUp(FunctionSession session, State state) {
    ObjectNode json = JsonNodeFactory.instance.objectNode();
    json.putArray("tokens").addArray().add(0);
    json.put("maxNewTokens", Math.min(2, state.maxTokens() - 1));
    invoke(session, state, FunctionRequest.of(json));
  }

  // ---- invoke ----

  /**
   * Checks the request against the state's limits.
   *
   * @throws InvalidRequestException naming the first thing that is wrong
   */
  static TokenRequest parse(State s, JsonNode json) {
    return TokenRequest.parse(json, REQUEST_FIELDS, new TokenRequest.Limits(s.maxBatch(), s.maxTokens(),
        s.config().vocabSize()));
  }

  @Override
  public void validate(State s, FunctionRequest request) {
    parse(s, request.json());
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    return invoke(session, s, request, ResponseStream.unstreamed());
  }

  /** An instance serves up to maxBatch requests at once: their sequences share its KV-cache rows. */
  @Override
  public int concurrency(State s) {
    return s.maxBatch();
  }

  /** Continuous batching over the instance's maxBatch KV-cache rows ({@link TokenEngine}). */
  @Override
  public FunctionEngine engine(FunctionSession session, State s) {
    return new TokenEngine(session, new Gpt2Passes(session, s),
        json -> new TokenEngine.Parsed(parse(s, json), out -> out), TokenEngine.DEFAULT_PREFILL_ROWS, MODULE);
  }

  /** One request alone; each step's ids go out as a part when the stream is streamed, and a cancel ends it. */
  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request, ResponseStream stream) {
    TokenRequest req = parse(s, request.json());
    Run run = new Run(session, s, req, stream);
    run.execute();
    return FunctionResponse.of(run.response());
  }

  /** One request alone: its prompt pass and its steps, the host waiting once unless it picks per step. */
  private static final class Run {
    private final FunctionSession session;
    private final State s;
    private final TokenRequest req;
    private final Gpt2Passes p;
    private final Generation gen;
    private final int batch;

    Run(FunctionSession session, State s, TokenRequest req, ResponseStream parts) {
      this.session = session;
      this.s = s;
      this.req = req;
      this.p = new Gpt2Passes(session, s);
      this.gen = new Generation(req, parts);
      this.batch = gen.batch();
    }

    void execute() {
      int steps = req.maxNewTokens();
      gen.upload(session, s.scratch().tokens(), s.scratch().positions(), s.scratch().cacheRows());

      // Prompt: one pass over all rows; the head runs on each sequence's last row only.
      p.forward(gen.promptRows(), 0, 0, 0);
      for (int b = 0; b < batch; b++) {
        p.finalNorm(gen.lastRow(b), b, 1);
      }
      if (!head(0)) {
        return;
      }
      // Each step feeds the ids the previous one chose, one row per sequence.
      for (int step = 1; step < steps; step++) {
        p.forward(batch, gen.stepRows(step), gen.stepRows(step), gen.decodeCacheRows());
        p.finalNorm(0, 0, batch);
        if (!head(step)) {
          return;
        }
      }
    }

    /**
     * Logits of the rows in {@code last}, their argmax into step {@code step}'s ids, and the host's part
     * ({@link Generation#afterHead}); false when every sequence has ended.
     */
    private boolean head(int step) {
      p.head(batch, gen.stepOutput(step));
      return gen.afterHead(session, step, s.scratch().tokens(), s.scratch().logits(), s.config().vocabSize());
    }

    ObjectNode response() {
      return gen.response(session, s.scratch().tokens(), s.scratch().logits(), s.config().vocabSize());
    }
  }
}
