package dev.thaw.runtime.function;

import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * What a function's requests and responses hold, for the serving protocols that must know it: the KServe
 * Open Inference Protocol (tensors) and OpenAI-style completions (a language model). Declaring one is
 * optional ({@link ThawFunction#signature}); a function without one is still served through its own JSON.
 *
 * @param inputs the request's tensors, each a field of the request JSON
 * @param outputs the response's tensors, each a field of the response JSON
 * @param languageModel present when the function generates text tokens, with the contract of {@link LanguageModel}
 */
public record FunctionSignature(List<TensorSpec> inputs, List<TensorSpec> outputs,
    Optional<LanguageModel> languageModel) {

  /** No declaration: the function is served through its own JSON only. */
  public static final FunctionSignature UNDECLARED = new FunctionSignature(List.of(), List.of(), Optional.empty());

  public FunctionSignature {
    inputs = List.copyOf(inputs);
    outputs = List.copyOf(outputs);
  }

  public boolean declared() {
    return !inputs.isEmpty() || !outputs.isEmpty() || languageModel.isPresent();
  }

  /**
   * A function that continues token sequences. Its requests are {@code {"tokens": [[ids...]], "maxNewTokens": n}}
   * and its responses {@code {"tokens": [[n ids...]]}}. A function whose {@code sampling} is true also takes
   * {@code temperature}, {@code topP}, {@code topK}, {@code seed}, {@code presencePenalty}, {@code frequencyPenalty},
   * {@code logitBias} ({@code {"id": bias}}), {@code stopTokens} (ids that end a sequence, kept as its last) and
   * {@code logprobs} (how many alternatives per token, 0 for the chosen one's alone), and answers with
   * {@code finish} ({@code "stop"} or {@code "length"} per sequence) and, when asked, {@code logprobs} (per sequence,
   * per token: {@code {"logprob": x, "top": [[id, logprob], ...]}}).
   *
   * @param encoding the tokenizer's name: as tiktoken spells it ({@code r50k_base} for GPT-2) when the server
   *     tokenizes with one of tiktoken's, else a label of the function's own ({@link ThawFunction#tokenizer}); null
   *     when the model has no tokenizer (token ids only)
   * @param vocabSize token ids are below this
   * @param contextLength prompt plus new tokens fit in this many positions
   * @param maxBatch the most sequences one request may hold
   * @param chat the chat template and the special tokens it reads, or null when the model has none
   * @param stopTokens ids that end a sequence (end of turn, end of text): a completion stops at the first
   * @param sampling true when requests may ask for sampling, stop tokens and log-probabilities
   */
  public record LanguageModel(String encoding, int vocabSize, int contextLength, int maxBatch, ChatFormat chat,
      List<Integer> stopTokens, boolean sampling) {

    public LanguageModel {
      if (encoding != null && encoding.isBlank() || vocabSize < 1 || contextLength < 1 || maxBatch < 1) {
        throw new IllegalArgumentException("a language model needs a vocabulary, a context length and a batch");
      }
      stopTokens = List.copyOf(stopTokens);
    }

    /** A greedy model on a tiktoken encoding, without a chat template or stop tokens. */
    public LanguageModel(String encoding, int vocabSize, int contextLength) {
      this(encoding, vocabSize, contextLength, 1, null, List.of(), false);
    }
  }

  /**
   * How a model's chats are written as a prompt: a Jinja template (Hugging Face's {@code chat_template}) and the
   * special tokens it may name ({@code bos_token}, {@code eos_token}, ...).
   */
  public record ChatFormat(String template, Map<String, String> specialTokens) {

    public ChatFormat {
      if (template == null || template.isEmpty()) {
        throw new IllegalArgumentException("a chat format needs a template");
      }
      specialTokens = Map.copyOf(specialTokens);
    }
  }
}
