package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.Generation;
import dev.thaw.examples.function.Sampling;
import dev.thaw.examples.function.StagedUpload;
import dev.thaw.examples.function.TokenEngine;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.llama.kernels.LlamaKernels;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionEngine;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.function.Tokenizer;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Text generation for the Llama family (Llama 3.x, Qwen2/2.5, Mistral): greedy decoding with a KV cache on the
 * kernels of {@link LlamaKernels}.
 *
 * <h2>Config</h2>
 * <pre>{@code
 * {"model": "llama-3.1-8b", "seed": 1}   // seeded random weights of a named shape (LlamaConfig.names())
 *   "dtype": "bf16" | "fp16"             //   their type (default bf16)
 *   "layers": 2                          //   fewer decoder layers than the shape has (every dimension kept)
 * {"path": "/dir"}                       // a Hugging Face directory: config.json + model.safetensors, or shards
 *                                        //   with model.safetensors.index.json
 *   "maxBatch": 4                        // sequences per request (default 4)
 *   "maxTokens": 2048                    // KV cache length: prompt + new tokens (default min(2048, context))
 * }</pre>
 * {@code init} loads the module (its sm_90a build, with the wgmma products, on compute capability 9.0), allocates
 * the weights, streams them up through pinned staging, allocates a KV cache of maxBatch × maxTokens positions per
 * layer ({@code kv.<layer>.k|v}, [maxBatch, Hkv, maxTokens, D]) and scratch for maxBatch × maxTokens prompt rows
 * ({@code act.*}, {@code io.*}), and runs one request to warm up. Weight buffers keep Hugging Face's names, except that a layer's q, k and v projections are one buffer
 * {@code model.layers.<i>.self_attn.qkv_proj.weight} (rows q | k | v; its bias likewise for Qwen2) and its gate
 * and up projections one {@code model.layers.<i>.mlp.gate_up_proj.weight} (rows gate | up): one product each.
 *
 * <h2>Requests</h2>
 * As GPT-2's ({@link TokenRequest}): {@code {"tokens": [[...], ...], "maxNewTokens": 16, "returnLogits": false}}
 * → {@code {"tokens": [[...], ...], "logits": [[...], ...]}}. With a {@code tokenizer.json} in the checkpoint that
 * {@link ByteLevelBpe} reads (Llama 3, Qwen2), {@code "text": "..."} or a list of strings may stand for
 * {@code tokens}; the response then adds {@code "text"}, the new tokens decoded (special tokens left out); the
 * tokenizer is read again on the first text request of a restored instance, from the same path. Prompts may
 * have different lengths: each sequence
 * has its own positions and cache row, no padding. The fields of {@link Sampling}
 * ({@code temperature}, {@code topK}, {@code topP}, {@code seed}, penalties, {@code logitBias}, {@code stopTokens},
 * {@code logprobs}) pick tokens on the host step by step, and the response then adds {@code finish} (and
 * {@code logprobs}); without them the ids stay on the device and the host waits once. The signature names the
 * checkpoint's chat template ({@code chat_template.jinja} or {@code tokenizer_config.json}) and end-of-sequence ids
 * ({@code generation_config.json}) for a server that speaks OpenAI's API. The prompt runs in one pass of M = Σ len rows (tensor-core
 * products), then each step runs one row per sequence (the weight-streaming products). Everything about a
 * request is checked before anything is launched, so a refused request leaves the device as it was.
 *
 * <h2>Serving</h2>
 * An instance serves up to maxBatch requests at once ({@link #concurrency}): a server hands them to its
 * {@link TokenEngine} ({@link #engine}), which batches every sequence in flight into each decode step, requests joining
 * and leaving between steps, each sequence in a KV-cache row of its own; a streamed request gets each step's ids as a
 * part, and a cancelled one ends within a step. {@link #invoke} serves one request alone (a build's profiling, the
 * CLI's {@code thaw run}).
 */
public final class LlamaFunction implements ThawFunction<LlamaFunction.State> {

  public static final String MODULE = "llama";
  public static final int DEFAULT_MAX_BATCH = 4;
  public static final int DEFAULT_MAX_TOKENS = 2048;
  /** A bound on maxBatch: the KV cache and scratch grow with it, and the request loop is per sequence. */
  public static final int MAX_BATCH_LIMIT = 64;
  /** Pinned staging for the weight upload: two halves of this size, filled and copied alternately. */
  static final int STAGING_BYTES = 32 << 20;

  private static final Set<String> CONFIG_FIELDS = Set.of("model", "seed", "dtype", "layers", "path", "maxBatch",
      "maxTokens");
  private static final Set<String> REQUEST_FIELDS = fields("tokens", "maxNewTokens", "returnLogits");
  private static final Set<String> TEXT_FIELDS = fields("text", "maxNewTokens", "returnLogits");
  /** The checkpoint file text requests are tokenized with. */
  public static final String TOKENIZER_FILE = "tokenizer.json";
  /** Tokenizers by path, loaded on the first text request (a restored instance may never see one). */
  private static final Map<String, ByteLevelBpe> TOKENIZERS = new ConcurrentHashMap<>();

  /**
   * The host state: the model's shape, sizes, and references to every buffer.
   *
   * @param weights where the weights came from (a path, or {@code seeded:<model>:<type>:<seed>})
   * @param tokenizer the checkpoint's {@code tokenizer.json} when it is one {@link ByteLevelBpe} reads, else null
   * @param noText why text requests are refused (no tokenizer, or which field of it is unsupported), or null
   * @param chat the checkpoint's chat template and special tokens, or null
   * @param stopTokens the ids the checkpoint's generation ends at (its end-of-sequence tokens)
   */
  public record State(LlamaConfig config, String weights, int maxBatch, int maxTokens, String module,
      Scratch scratch, List<BufferRef> kCache, List<BufferRef> vCache, String tokenizer, String noText,
      FunctionSignature.ChatFormat chat, List<Integer> stopTokens) {

    public State {
      kCache = List.copyOf(kCache);
      vCache = List.copyOf(vCache);
      stopTokens = stopTokens == null ? List.of() : List.copyOf(stopTokens);
    }

    /** This state with {@code text}'s tokenizer, chat template and stop tokens. */
    State withText(Text text) {
      return new State(config, weights, maxBatch, maxTokens, module, scratch, kCache, vCache, text.tokenizer(),
          text.noText(), text.chat(), text.stops());
    }
  }

  private static Set<String> fields(String... own) {
    Set<String> all = new HashSet<>(Set.of(own));
    all.addAll(Sampling.FIELDS);
    return Set.copyOf(all);
  }

  /**
   * A language model that samples, on the checkpoint's {@code tokenizer.json} when {@link ByteLevelBpe} reads it
   * (token ids only otherwise), with the checkpoint's chat template and end-of-sequence ids.
   */
  @Override
  public FunctionSignature signature(State s) {
    return new FunctionSignature(List.of(), List.of(), Optional.of(new FunctionSignature.LanguageModel(
        s.tokenizer() == null ? null : TOKENIZER_FILE, s.config().vocabSize(), s.maxTokens(), s.maxBatch(), s.chat(),
        s.stopTokens(), true)));
  }

  /** The checkpoint's tokenizer, read again from its path (a restored instance's first use pays for it). */
  @Override
  public Optional<Tokenizer> tokenizer(State s) {
    return s.tokenizer() == null ? Optional.empty() : Optional.of(textTokenizer(s));
  }

  /**
   * Per-request device memory. {@code tokens} holds the prompt rows and then each step's chosen ids (step s of
   * sequence b at prompt rows + s × batch + b), so a step reads its input where the previous step's argmax wrote
   * it and the host waits only once, at the end. {@code invFreq} is the model's rotary inverse frequencies.
   */
  public record Scratch(BufferRef tokens, BufferRef positions, BufferRef cacheRows, BufferRef invFreq, BufferRef x,
      BufferRef h, BufferRef qkv, BufferRef attn, BufferRef attnPartial, BufferRef gateUp, BufferRef act,
      BufferRef last, BufferRef logits) {}

  /** One device weight buffer and the checkpoint tensors laid end to end in it. */
  record DeviceWeight(String name, List<LlamaTensor> parts) {
    long bytes() {
      return parts.stream().mapToLong(LlamaTensor::bytes).sum();
    }
  }

  /** Buffer names of the fused weights, per layer. */
  static String qkvWeight(int i) {
    return LlamaTensor.layer(i, "self_attn.qkv_proj.weight");
  }

  static String qkvBias(int i) {
    return LlamaTensor.layer(i, "self_attn.qkv_proj.bias");
  }

  static String gateUpWeight(int i) {
    return LlamaTensor.layer(i, "mlp.gate_up_proj.weight");
  }

  /** The device buffers of a model, in upload order, each with the tensors it holds. */
  static List<DeviceWeight> deviceWeights(LlamaConfig config) {
    Map<String, LlamaTensor> byName = new LinkedHashMap<>();
    for (LlamaTensor t : LlamaTensor.all(config)) {
      byName.put(t.name(), t);
    }
    List<DeviceWeight> out = new ArrayList<>();
    out.add(one(byName, "model.embed_tokens.weight"));
    for (int i = 0; i < config.layers(); i++) {
      out.add(one(byName, LlamaTensor.layer(i, "input_layernorm.weight")));
      out.add(fused(byName, qkvWeight(i), i, "self_attn.q_proj.weight", "self_attn.k_proj.weight",
          "self_attn.v_proj.weight"));
      if (config.qkvBias()) {
        out.add(fused(byName, qkvBias(i), i, "self_attn.q_proj.bias", "self_attn.k_proj.bias",
            "self_attn.v_proj.bias"));
      }
      out.add(one(byName, LlamaTensor.layer(i, "self_attn.o_proj.weight")));
      out.add(one(byName, LlamaTensor.layer(i, "post_attention_layernorm.weight")));
      out.add(fused(byName, gateUpWeight(i), i, "mlp.gate_proj.weight", "mlp.up_proj.weight"));
      out.add(one(byName, LlamaTensor.layer(i, "mlp.down_proj.weight")));
    }
    out.add(one(byName, "model.norm.weight"));
    if (!config.tieEmbeddings()) {
      out.add(one(byName, "lm_head.weight"));
    }
    return List.copyOf(out);
  }

  private static DeviceWeight one(Map<String, LlamaTensor> byName, String name) {
    return new DeviceWeight(name, List.of(byName.get(name)));
  }

  private static DeviceWeight fused(Map<String, LlamaTensor> byName, String name, int layer, String... parts) {
    List<LlamaTensor> ts = new ArrayList<>();
    for (String p : parts) {
      ts.add(byName.get(LlamaTensor.layer(layer, p)));
    }
    return new DeviceWeight(name, ts);
  }

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  // ---- init ----

  @Override
  public State init(FunctionSession session, JsonNode config) throws IOException {
    checkConfigFields(config);
    try (LlamaWeights weights = openWeights(config)) {
      LlamaConfig c = weights.config();
      int contextLimit = contextLimit(c);
      int maxBatch = intSetting(config, "maxBatch", DEFAULT_MAX_BATCH, 1, MAX_BATCH_LIMIT);
      int maxTokens = intSetting(config, "maxTokens", Math.min(DEFAULT_MAX_TOKENS, contextLimit), 1, contextLimit);
      c.checkContext(maxTokens);
      session.loadModule(MODULE, LlamaKernels.ptx(session.context().device()));
      List<DeviceWeight> dw = deviceWeights(c);
      for (DeviceWeight w : dw) {
        session.allocate(w.name(), w.bytes());
      }
      try (StagedUpload staging = new StagedUpload(session, STAGING_BYTES)) {
        for (DeviceWeight w : dw) {
          long at = session.address(new BufferRef(w.name()));
          for (LlamaTensor t : w.parts()) {
            staging.copy(at, t.bytes(), (offset, view) -> weights.read(t, offset, view));
            at += t.bytes();
          }
        }
      }

      LlamaMemory memory = LlamaMemory.of(session);
      LlamaShard whole = new LlamaShard(c, 0, 1);
      Scratch scratch = allocateScratch(memory, whole, maxBatch, maxTokens);
      List<BufferRef> k = new ArrayList<>();
      List<BufferRef> v = new ArrayList<>();
      allocateCache(memory, whole, maxBatch, maxTokens, k, v);
      Text text = text(config);
      State state = new State(c, weights.describe(), maxBatch, maxTokens, MODULE, scratch, k, v, text.tokenizer(),
          text.noText(), text.chat(), text.stops());
      warmUp(session, state);
      return state;
    }
  }

  /**
   * The scratch of passes over up to maxBatch × maxTokens rows for {@code shard}'s widths (the whole model's at one
   * rank), with the rotary frequencies uploaded: a pass's input and output rows ({@code io.*}) and every activation
   * ({@code act.*}). The logits are the whole vocabulary's, gathered on every rank.
   */
  static Scratch allocateScratch(LlamaMemory memory, LlamaShard shard, int maxBatch, int maxTokens) {
    LlamaConfig c = shard.config();
    long rows = (long) maxBatch * maxTokens;
    long cap = rows + maxBatch; // prompt rows, then one id per sequence per step (see Scratch)
    long cc = c.hiddenSize();
    float[] freq = c.inverseFrequencies();
    BufferRef invFreq = memory.allocate("rope.inv_freq", 4L * freq.length);
    ByteBuffer f = ByteBuffer.allocateDirect(4 * freq.length).order(ByteOrder.LITTLE_ENDIAN);
    f.asFloatBuffer().put(freq);
    memory.upload(invFreq, f);
    return new Scratch(
        memory.allocate("io.tokens", 4 * cap),
        memory.allocate("io.positions", 4 * cap),
        memory.allocate("io.cache_rows", 4 * cap),
        invFreq,
        memory.allocate("act.x", 4 * rows * cc),
        memory.allocate("act.h", 2 * rows * cc),
        memory.allocate("act.qkv", 2 * rows * shard.qkvWidth()),
        memory.allocate("act.attn", 2 * rows * shard.attentionWidth()),
        memory.allocate("act.attn_partial", 4 * LlamaKernels.decodePartialFloats(maxBatch, shard.heads(),
            c.headDim(), LlamaKernels.MAX_SPLITS)),
        // Only passes of at most GEMV_MAX_ROWS rows write gate | up: larger ones fuse SwiGLU into the product.
        memory.allocate("act.gate_up", 2L * Math.min(rows, LlamaKernels.GEMV_MAX_ROWS) * 2
            * shard.intermediateSize()),
        memory.allocate("act.mlp", 2 * rows * shard.intermediateSize()),
        memory.allocate("act.last", 2L * maxBatch * cc),
        memory.allocate("act.logits", 4L * maxBatch * c.vocabSize()));
  }

  /** A KV cache of maxBatch × maxTokens positions per layer for {@code shard}'s key-value heads, into k and v. */
  static void allocateCache(LlamaMemory memory, LlamaShard shard, int maxBatch, int maxTokens, List<BufferRef> k,
      List<BufferRef> v) {
    long cacheBytes = 2L * maxBatch * maxTokens * shard.kvHeads() * shard.config().headDim();
    for (int i = 0; i < shard.config().layers(); i++) {
      k.add(memory.allocate("kv." + i + ".k", cacheBytes));
      v.add(memory.allocate("kv." + i + ".v", cacheBytes));
    }
  }

  /**
   * The longest context a pass runs: any with flash prefill ({@link #flashPrefill}), else
   * {@link LlamaKernels#MAX_CONTEXT}, and never past the model's own.
   */
  static int contextLimit(LlamaConfig c) {
    return flashPrefill(c) ? c.maxPositions() : Math.min(c.maxPositions(), LlamaKernels.MAX_CONTEXT);
  }

  /**
   * Whether prompt passes run {@link LlamaKernels#flashAttention} (any context) rather than
   * {@link LlamaKernels#attention} (at most {@link LlamaKernels#MAX_CONTEXT} positions): the head size decides.
   */
  static boolean flashPrefill(LlamaConfig c) {
    return LlamaKernels.FLASH_HEAD_SIZES.contains(c.headDim());
  }

  /**
   * What a checkpoint folder gives the text side: its tokenizer file (null, and why, when it has none or it does not
   * read), its chat template and its stop tokens.
   */
  record Text(String tokenizer, String noText, FunctionSignature.ChatFormat chat, List<Integer> stops) {}

  /** The text side of the weights {@code config} names: none for seeded weights ({@code model}). */
  static Text text(JsonNode config) throws IOException {
    String tokenizer = null;
    String noText = "these weights have no " + TOKENIZER_FILE + ": send 'tokens'";
    JsonNode path = config.get("path");
    ByteLevelBpe bpe = null;
    if (path != null && Files.isRegularFile(Path.of(path.asText(), TOKENIZER_FILE))) {
      Path file = Path.of(path.asText(), TOKENIZER_FILE).toAbsolutePath();
      try {
        bpe = ByteLevelBpe.load(file);
        TOKENIZERS.put(file.toString(), bpe);
        tokenizer = file.toString();
        noText = null;
      } catch (InvalidConfigException e) {
        noText = e.getMessage() + ": send 'tokens'";
      }
    }
    FunctionSignature.ChatFormat chat = null;
    List<Integer> stops = List.of();
    if (path != null) {
      Path dir = Path.of(path.asText());
      chat = ChatFiles.chat(dir);
      ByteLevelBpe known = bpe;
      stops = ChatFiles.stopTokens(dir, text -> known == null ? -1 : known.id(text));
    }
    return new Text(tokenizer, noText, chat, stops);
  }

  /** Refuses a config that is not an object or names a field this function does not read. */
  static void checkConfigFields(JsonNode config) {
    if (config == null || !config.isObject()) {
      throw new InvalidConfigException("the llama config is a JSON object");
    }
    for (Iterator<String> it = config.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!CONFIG_FIELDS.contains(f)) {
        throw new InvalidConfigException("unknown config field '" + f + "'; known: " + CONFIG_FIELDS);
      }
    }
  }

  static LlamaWeights openWeights(JsonNode config) throws IOException {
    JsonNode model = config.get("model");
    JsonNode path = config.get("path");
    if ((model == null) == (path == null)) {
      throw new InvalidConfigException("the config needs exactly one of 'model' (one of " + LlamaConfig.names()
          + ") and 'path' (a Hugging Face directory)");
    }
    if (path != null) {
      if (!path.isTextual() || path.asText().isEmpty()) {
        throw new InvalidConfigException("'path' must be a directory name, not " + path);
      }
      for (String f : List.of("seed", "dtype", "layers")) {
        if (config.has(f)) {
          throw new InvalidConfigException("'" + f + "' goes with 'model', not with 'path' (the checkpoint has its "
              + "own)");
        }
      }
      return LlamaCheckpoint.open(Path.of(path.asText()));
    }
    if (!model.isTextual()) {
      throw new InvalidConfigException("'model' must be a name, one of " + LlamaConfig.names());
    }
    JsonNode seed = config.path("seed");
    if (!seed.isMissingNode() && !(seed.isIntegralNumber() && seed.canConvertToLong())) {
      throw new InvalidConfigException("'seed' must be an integer, not " + seed);
    }
    HalfType type = HalfType.BF16;
    JsonNode dtype = config.get("dtype");
    if (dtype != null) {
      try {
        type = HalfType.parse(dtype.asText());
      } catch (IllegalArgumentException e) {
        throw new InvalidConfigException("'dtype' must be \"bf16\" or \"fp16\", not " + dtype);
      }
    }
    LlamaConfig shape = LlamaConfig.named(model.asText()).withType(type);
    if (config.has("layers")) {
      shape = shape.withLayers(intSetting(config, "layers", shape.layers(), 1, shape.layers()));
    }
    return new SeededLlamaWeights(shape, seed.asLong(1));
  }

  static int intSetting(JsonNode config, String field, int fallback, int min, int max) {
    JsonNode v = config.get(field);
    if (v == null) {
      return fallback;
    }
    if (!v.isIntegralNumber() || !v.canConvertToInt() || v.asInt() < min || v.asInt() > max) {
      throw new InvalidConfigException("'" + field + "' must be an integer in [" + min + ", " + max + "], not " + v);
    }
    return v.asInt();
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
   * @throws dev.thaw.runtime.function.InvalidRequestException naming the first thing that is wrong
   */
  static TokenRequest parse(State s, JsonNode json) {
    return TokenRequest.parse(json, REQUEST_FIELDS, new TokenRequest.Limits(s.maxBatch(), s.maxTokens(),
        s.config().vocabSize()));
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request) {
    return invoke(session, s, request, ResponseStream.unstreamed());
  }

  /** One request alone; each step's ids go out as a part when the stream is streamed, and a cancel ends it. */
  @Override
  public FunctionResponse invoke(FunctionSession session, State s, FunctionRequest request, ResponseStream stream) {
    JsonNode json = request.json();
    ByteLevelBpe text = json != null && json.has("text") ? textTokenizer(s) : null;
    TokenRequest req = parse(s, text == null ? json : encode(text, json));
    Run run = new Run(session, s, req, stream);
    run.execute();
    ObjectNode out = run.response();
    return FunctionResponse.of(text != null ? withText(text, out) : out);
  }

  /** An instance serves up to maxBatch requests at once: their sequences share its KV-cache rows. */
  @Override
  public int concurrency(State s) {
    return s.maxBatch();
  }

  /**
   * Continuous batching over the instance's maxBatch KV-cache rows ({@link TokenEngine}): requests join and leave
   * between decode steps, each sequence in a row of its own at its own length.
   */
  @Override
  public FunctionEngine engine(FunctionSession session, State s) {
    return new TokenEngine(session, new LlamaPasses(session, s), json -> {
      ByteLevelBpe text = json != null && json.has("text") ? textTokenizer(s) : null;
      TokenRequest req = parse(s, text == null ? json : encode(text, json));
      return new TokenEngine.Parsed(req, text == null ? out -> out : out -> withText(text, out));
    }, TokenEngine.DEFAULT_PREFILL_ROWS, MODULE);
  }

  /** The response with {@code text}: each sequence's new tokens decoded, special tokens left out. */
  static ObjectNode withText(ByteLevelBpe text, ObjectNode out) {
    ArrayNode texts = out.putArray("text");
    for (JsonNode ids : out.get("tokens")) {
      int[] v = new int[ids.size()];
      for (int i = 0; i < v.length; i++) {
        v[i] = ids.get(i).asInt();
      }
      texts.add(text.decode(v, true));
    }
    return out;
  }

  static ByteLevelBpe textTokenizer(State s) {
    if (s.tokenizer() == null) {
      throw new InvalidRequestException("'text' needs a tokenizer: " + s.noText());
    }
    try {
      return TOKENIZERS.computeIfAbsent(s.tokenizer(), p -> {
        try {
          return ByteLevelBpe.load(Path.of(p));
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
      });
    } catch (RuntimeException e) {
      throw new InvalidRequestException("'text' needs " + s.tokenizer() + ", which cannot be read here ("
          + e.getMessage() + "): send 'tokens'");
    }
  }

  /** The request with {@code text} (a string or a list of them) replaced by the ids of each. */
  static ObjectNode encode(ByteLevelBpe bpe, JsonNode json) {
    for (Iterator<String> it = json.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!TEXT_FIELDS.contains(f)) {
        throw new InvalidRequestException(f.equals("tokens") ? "send one of 'text' and 'tokens', not both"
            : "unknown field '" + f + "'; known: " + TEXT_FIELDS);
      }
    }
    JsonNode text = json.get("text");
    List<String> prompts = new ArrayList<>();
    if (text.isTextual()) {
      prompts.add(text.asText());
    } else if (text.isArray()) {
      for (JsonNode t : text) {
        if (!t.isTextual()) {
          throw new InvalidRequestException("'text' must be a string or a list of strings, not " + text);
        }
        prompts.add(t.asText());
      }
    } else {
      throw new InvalidRequestException("'text' must be a string or a list of strings, not " + text);
    }
    ObjectNode out = ((ObjectNode) json).deepCopy();
    out.remove("text");
    ArrayNode all = out.putArray("tokens");
    for (String p : prompts) {
      ArrayNode row = all.addArray();
      for (int id : bpe.encode(p)) {
        row.add(id);
      }
    }
    return out;
  }

  /** One request alone: its prompt pass and its steps, the host waiting once unless it picks per step. */
  private static final class Run {
    private final FunctionSession session;
    private final State s;
    private final TokenRequest req;
    private final LlamaPasses p;
    private final Generation gen;
    private final int batch;

    Run(FunctionSession session, State s, TokenRequest req, ResponseStream parts) {
      this.session = session;
      this.s = s;
      this.req = req;
      this.p = new LlamaPasses(session, s);
      this.gen = new Generation(req, parts);
      this.batch = gen.batch();
    }

    void execute() {
      int steps = req.maxNewTokens();
      gen.upload(session, s.scratch().tokens(), s.scratch().positions(), s.scratch().cacheRows());

      // Prompt: one pass over all rows; the head runs on each sequence's last row only.
      p.forward(gen.promptRows(), 0, 0, 0, 0);
      for (int b = 0; b < batch; b++) {
        p.finalNorm(gen.lastRow(b), b, 1);
      }
      if (!head(0)) {
        return;
      }
      // Each step feeds the ids the previous one chose, one row per sequence.
      int longestPrompt = 0;
      for (int[] prompt : req.prompts()) {
        longestPrompt = Math.max(longestPrompt, prompt.length);
      }
      for (int step = 1; step < steps; step++) {
        p.forward(batch, gen.stepRows(step), gen.stepRows(step), gen.decodeCacheRows(), longestPrompt + step);
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
