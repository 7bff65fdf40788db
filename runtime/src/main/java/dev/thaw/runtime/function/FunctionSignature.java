package dev.thaw.runtime.function;

import java.util.List;
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
   * A function that continues token sequences, greedily. Its requests are
   * {@code {"tokens": [[ids...]], "maxNewTokens": n}} and its responses {@code {"tokens": [[n ids...]]}}.
   *
   * @param encoding the tokenizer's name as tiktoken spells it, e.g. {@code r50k_base} for GPT-2
   * @param vocabSize token ids are below this
   * @param contextLength prompt plus new tokens fit in this many positions
   */
  public record LanguageModel(String encoding, int vocabSize, int contextLength) {

    public LanguageModel {
      if (encoding == null || encoding.isBlank() || vocabSize < 1 || contextLength < 1) {
        throw new IllegalArgumentException("a language model needs an encoding, a vocabulary and a context length");
      }
    }
  }
}
