package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.function.TokenRequest;
import dev.thaw.runtime.function.BufferRef;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionResponse;
import dev.thaw.runtime.function.FunctionSession;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.runtime.function.GroupFunction;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.InvalidRequestException;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.Tokenizer;
import dev.thaw.runtime.gpu.GpuDriver;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * What an image of one rank of a tensor-parallel Llama names as its function: the rank's host state (its model's
 * sizes and buffers, which rank of how many, its exchange buffers). A rank is built with its group
 * ({@link LlamaTensorParallel#record}) and serves only with it ({@link #assemble}: the group over the restored ranks,
 * {@link LlamaTensorParallel#restored}): alone it neither initializes nor answers, since every pass meets the other
 * ranks twice a layer. The group serves {@code LlamaFunction}'s token requests ({@code tokens}, {@code maxNewTokens},
 * {@code returnLogits}), one at a time, greedily: a request that asks to sample is refused.
 */
public final class LlamaRankFunction implements GroupFunction<LlamaRankFunction.State> {

  /**
   * Rank {@code rank} of {@code ranks}: its passes' state over its shard's widths, and its buffers of the group's
   * exchanges (the attention's and the MLP's fp32 partials, the head's vocabulary slice), which the other ranks read.
   */
  public record State(LlamaFunction.State model, int rank, int ranks, BufferRef partialAttn, BufferRef partialMlp,
      BufferRef logitSlices) {

    public State {
      if (ranks < 2 || rank < 0 || rank >= ranks) {
        throw new IllegalArgumentException("rank " + rank + " of " + ranks + " is not a rank of a group");
      }
    }
  }

  @Override
  public Class<State> stateType() {
    return State.class;
  }

  @Override
  public State init(FunctionSession session, JsonNode config) {
    throw new InvalidConfigException("a rank of a tensor-parallel Llama is built with its group "
        + "(LlamaTensorParallel.record), not alone");
  }

  @Override
  public FunctionResponse invoke(FunctionSession session, State state, FunctionRequest request) {
    throw new InvalidRequestException("rank " + state.rank() + " of " + state.ranks() + " of a tensor-parallel "
        + state.model().config().name() + " serves only with its group: restore the group's image");
  }

  /**
   * A language model that decodes greedily (the server refuses sampling for it, OpenAI-style), with the checkpoint's
   * tokenizer, chat template and stop tokens when it was built from a folder that has them.
   */
  @Override
  public FunctionSignature signature(State s) {
    LlamaFunction.State m = s.model();
    return new FunctionSignature(List.of(), List.of(), Optional.of(new FunctionSignature.LanguageModel(
        m.tokenizer() == null ? null : LlamaFunction.TOKENIZER_FILE, m.config().vocabSize(), m.maxTokens(),
        m.maxBatch(), m.chat(), m.stopTokens(), false)));
  }

  @Override
  public Optional<Tokenizer> tokenizer(State s) {
    return s.model().tokenizer() == null ? Optional.empty() : Optional.of(LlamaFunction.textTokenizer(s.model()));
  }

  @Override
  public Group assemble(List<FunctionSession> sessions, List<State> states) {
    return new TensorParallelGroup(LlamaTensorParallel.restored(sessions, states), states.get(0).model());
  }

  /**
   * The split model recorded over {@code devices}, rank r on {@code devices[r]}, from {@code LlamaFunction}'s config
   * ({@code model} with {@code seed}, {@code dtype}, {@code layers}, or {@code path}; {@code maxBatch},
   * {@code maxTokens}): the weights read once and each rank's shard uploaded as it is read
   * ({@link LlamaTensorParallel#record}). The image keeps the config with {@code ranks}.
   */
  @Override
  public Recording record(GpuDriver driver, int[] devices, JsonNode config) throws IOException {
    LlamaFunction.checkConfigFields(config);
    LlamaTensorParallel model;
    try (LlamaWeights weights = LlamaFunction.openWeights(config)) {
      LlamaConfig c = weights.config();
      int contextLimit = LlamaFunction.contextLimit(c);
      int maxBatch = LlamaFunction.intSetting(config, "maxBatch", LlamaFunction.DEFAULT_MAX_BATCH, 1,
          LlamaFunction.MAX_BATCH_LIMIT);
      int maxTokens = LlamaFunction.intSetting(config, "maxTokens",
          Math.min(LlamaFunction.DEFAULT_MAX_TOKENS, contextLimit), 1, contextLimit);
      c.checkContext(maxTokens);
      try {
        model = LlamaTensorParallel.record(driver, devices, weights, maxBatch, maxTokens);
      } catch (IllegalArgumentException e) {
        // The split or the devices (a dimension the ranks do not divide, devices that are not peers): a config error.
        throw new InvalidConfigException(e.getMessage());
      }
    }
    ObjectNode kept = config.deepCopy();
    kept.put("ranks", devices.length);
    LlamaFunction.State limits = model.rankState(0).model();
    // What each rank's image records: its state with the checkpoint's text side (the passes never read it).
    LlamaFunction.Text text = LlamaFunction.text(config);
    List<State> images = new ArrayList<>();
    for (int r = 0; r < devices.length; r++) {
      State s = model.rankState(r);
      images.add(new State(s.model().withText(text), s.rank(), s.ranks(), s.partialAttn(), s.partialMlp(),
          s.logitSlices()));
    }
    return new Recording() {
      @Override
      public FunctionSession session(int rank) {
        return model.session(rank);
      }

      @Override
      public Object rankState(int rank) {
        return images.get(rank);
      }

      @Override
      public JsonNode config() {
        return kept;
      }

      @Override
      public FunctionResponse invoke(FunctionRequest request) {
        return answer(model, limits, request);
      }

      @Override
      public void close() {
        model.close();
      }
    };
  }

  /** The group's requests: each parsed against the model's limits, generated on every rank, answered from rank 0. */
  private record TensorParallelGroup(LlamaTensorParallel model, LlamaFunction.State limits) implements Group {

    @Override
    public FunctionResponse invoke(FunctionRequest request, ResponseStream stream) {
      return answer(model, limits, request);
    }

    @Override
    public void close() {
      model.close();
    }
  }

  /** A token request on the split model: greedy ids (and the last logits when asked), as {@code LlamaFunction}'s. */
  private static FunctionResponse answer(LlamaTensorParallel model, LlamaFunction.State limits,
      FunctionRequest request) {
    JsonNode json = request.json();
    ByteLevelBpe text = json != null && json.has("text") ? LlamaFunction.textTokenizer(limits) : null;
    TokenRequest req = LlamaFunction.parse(limits, text == null ? json : LlamaFunction.encode(text, json));
    if (!req.sampling().greedy()) {
      throw new InvalidRequestException("a tensor-parallel " + model.config().name() + " decodes greedily: "
          + "leave out the sampling fields (temperature 0)");
    }
    LlamaTensorParallel.Result r = model.generate(req.prompts(), req.maxNewTokens());
    ObjectNode out = JsonNodeFactory.instance.objectNode();
    ArrayNode ids = out.putArray("tokens");
    for (int[] row : r.tokens()) {
      ArrayNode a = ids.addArray();
      for (int id : row) {
        a.add(id);
      }
    }
    if (req.returnLogits()) {
      ArrayNode all = out.putArray("logits");
      for (float[] row : r.logits()) {
        ArrayNode a = all.addArray();
        for (float v : row) {
          a.add(v);
        }
      }
    }
    return FunctionResponse.of(text != null ? LlamaFunction.withText(text, out) : out);
  }
}
