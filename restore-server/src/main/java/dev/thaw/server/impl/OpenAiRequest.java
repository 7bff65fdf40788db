package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionSignature.LanguageModel;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * What a completions or chat request asks, read from its body and checked before its prompt is known: the function
 * it names (a language model), the generation's bounds, streaming, stop strings, echo, log-probabilities and the
 * function's sampling fields. Every refusal is an {@link OpenAiError} naming the parameter at fault, in the order
 * the fields are read.
 *
 * @param maxTokens the tokens asked for; null when the request leaves it to the context's room
 * @param logprobs the top alternatives asked per token; -1 when no log-probabilities are asked
 * @param sampling the function's sampling fields ({@code temperature}, {@code topP}, ..., {@code seed})
 */
record OpenAiRequest(String model, ImageInfo image, LanguageModel lm, boolean chat, Integer maxTokens, int n,
    boolean stream, boolean includeUsage, List<String> stops, boolean echo, int logprobs, ObjectNode sampling) {

  static final int MAX_N = 128;
  static final int MAX_STOPS = 4;
  /** Completions' {@code logprobs} as OpenAI bounds it (vLLM allows more: the function's own bound is 20). */
  static final int MAX_COMPLETION_LOGPROBS = 5;
  static final int MAX_TOP_LOGPROBS = 20;

  private static final Set<String> COMMON = Set.of("model", "max_tokens", "temperature", "top_p", "top_k", "n",
      "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "user", "seed",
      "logprobs");
  private static final Set<String> COMPLETION_FIELDS = union(COMMON, "prompt", "echo", "suffix", "best_of");
  private static final Set<String> CHAT_FIELDS = union(COMMON, "messages", "top_logprobs", "max_completion_tokens",
      "response_format", "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call", "store",
      "metadata", "service_tier", "modalities", "reasoning_effort");

  private static Set<String> union(Set<String> a, String... more) {
    Set<String> s = new HashSet<>(a);
    s.addAll(List.of(more));
    return Set.copyOf(s);
  }

  /** The request a body asks of {@code /v1/chat/completions} ({@code chat}) or {@code /v1/completions}. */
  static OpenAiRequest of(JsonNode body, boolean chat, Scheduler scheduler) {
    if (!body.isObject()) {
      throw OpenAiError.invalid("the request body must be a JSON object", null);
    }
    checkFields(body, chat);
    JsonNode m = body.get("model");
    if (m == null || !m.isTextual()) {
      throw OpenAiError.invalid("'model' is required: the name of a function", "model");
    }
    String model = m.asText();
    ImageInfo image = scheduler.image(model).orElseThrow(() -> OpenAiError.modelNotFound(model));
    LanguageModel lm = image.signature().languageModel().orElseThrow(() -> new OpenAiError(400,
        "invalid_request_error", "model_not_supported", "model", "The function '" + model
        + "' is not a language model"));
    refuseUnsupported(body);
    Integer maxTokens = optionalInt(body, chat && body.hasNonNull("max_completion_tokens") ? "max_completion_tokens"
        : "max_tokens", 1, Integer.MAX_VALUE);
    int n = intOr(body, "n", 1, 1, MAX_N);
    if (!chat && body.hasNonNull("best_of") && intOr(body, "best_of", n, 1, MAX_N) != n) {
      throw OpenAiError.unsupported("best_of", "best_of must equal n: completions are not ranked");
    }
    boolean stream = bool(body, "stream", false);
    boolean includeUsage = includeUsage(body, stream);
    List<String> stops = stops(body.get("stop"));
    boolean echo = !chat && bool(body, "echo", false);
    int logprobs = logprobs(body, chat);
    if (echo && logprobs >= 0) {
      throw OpenAiError.unsupported("echo", "'echo' with 'logprobs' (the prompt's log-probabilities) is not supported");
    }
    ObjectNode sampling = sampling(body, lm);
    checkGreedy(model, lm, sampling, logprobs);
    return new OpenAiRequest(model, image, lm, chat, maxTokens, n, stream, includeUsage, stops, echo, logprobs,
        sampling);
  }

  /**
   * The function's request: each prompt's ids {@code n} times (a request with {@code n} completions of p prompts is
   * one function request of n × p sequences), the tokens to generate, and, for a function that samples, the sampling
   * fields, the log-probabilities asked and the model's stop tokens.
   */
  ObjectNode function(List<int[]> prompts, int maxNewTokens) {
    ObjectNode request = Http.object();
    ArrayNode rows = request.putArray("tokens");
    for (int[] p : prompts) {
      for (int i = 0; i < n; i++) {
        ArrayNode row = rows.addArray();
        for (int id : p) {
          row.add(id);
        }
      }
    }
    request.put("maxNewTokens", maxNewTokens);
    if (lm.sampling()) {
      request.setAll(sampling);
      if (logprobs >= 0) {
        request.put("logprobs", logprobs);
      }
      if (!lm.stopTokens().isEmpty()) {
        ArrayNode stopTokens = request.putArray("stopTokens");
        lm.stopTokens().forEach(stopTokens::add);
      }
    }
    return request;
  }

  private static void checkFields(JsonNode body, boolean chat) {
    Set<String> known = chat ? CHAT_FIELDS : COMPLETION_FIELDS;
    for (Iterator<String> it = body.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!known.contains(f)) {
        throw OpenAiError.invalid("Unrecognized request argument supplied: " + f, f);
      }
    }
  }

  /** OpenAI's fields this server knows and does not do: tools, functions, a suffix, a response format but text. */
  private static void refuseUnsupported(JsonNode body) {
    for (String f : List.of("suffix", "tools", "functions", "tool_choice", "function_call")) {
      if (body.hasNonNull(f)) {
        throw OpenAiError.unsupported(f, "'" + f + "' is not supported");
      }
    }
    JsonNode format = body.get("response_format");
    if (format != null && !format.isNull() && !format.path("type").asText().equals("text")) {
      throw OpenAiError.unsupported("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
  }

  private static boolean includeUsage(JsonNode body, boolean stream) {
    JsonNode so = body.get("stream_options");
    if (so == null || so.isNull()) {
      return false;
    }
    if (!stream) {
      throw OpenAiError.invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    if (!so.isObject()) {
      throw OpenAiError.invalid("'stream_options' must be an object", "stream_options");
    }
    return bool(so, "include_usage", false);
  }

  /** Chat's {@code logprobs: true} with {@code top_logprobs}, or completions' {@code logprobs}; -1 for none. */
  private static int logprobs(JsonNode body, boolean chat) {
    if (chat) {
      if (bool(body, "logprobs", false)) {
        return intOr(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS);
      } else if (body.hasNonNull("top_logprobs")) {
        throw OpenAiError.invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      }
    } else if (body.hasNonNull("logprobs")) {
      return intOr(body, "logprobs", 0, 0, MAX_COMPLETION_LOGPROBS);
    }
    return -1;
  }

  private static ObjectNode sampling(JsonNode body, LanguageModel lm) {
    ObjectNode sampling = Http.object();
    sampling.put("temperature", number(body, "temperature", 1, 0, 2));
    sampling.put("topP", number(body, "top_p", 1, 0, 1));
    if (sampling.get("topP").asDouble() == 0) {
      throw OpenAiError.invalid("'top_p' must be in (0, 1]", "top_p");
    }
    int topK = intOr(body, "top_k", 0, -1, lm.vocabSize());
    sampling.put("topK", Math.max(0, topK));
    sampling.put("presencePenalty", number(body, "presence_penalty", 0, -2, 2));
    sampling.put("frequencyPenalty", number(body, "frequency_penalty", 0, -2, 2));
    sampling.put("seed", body.hasNonNull("seed") ? longOf(body, "seed") : ThreadLocalRandom.current().nextLong());
    JsonNode bias = body.get("logit_bias");
    if (bias != null && !bias.isNull()) {
      logitBias(bias, lm, sampling.putObject("logitBias"));
    }
    return sampling;
  }

  private static void logitBias(JsonNode bias, LanguageModel lm, ObjectNode into) {
    if (!bias.isObject()) {
      throw OpenAiError.invalid("'logit_bias' must map token ids to biases in [-100, 100]", "logit_bias");
    }
    for (Iterator<Map.Entry<String, JsonNode>> it = bias.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (!e.getKey().matches("[0-9]{1,9}") || Integer.parseInt(e.getKey()) >= lm.vocabSize()
          || !e.getValue().isNumber() || Math.abs(e.getValue().asDouble()) > 100) {
        throw OpenAiError.invalid("'logit_bias' maps token ids below " + lm.vocabSize() + " to biases in [-100, 100], "
            + "not " + e.getKey() + ": " + e.getValue(), "logit_bias");
      }
      into.put(e.getKey(), e.getValue().asDouble());
    }
  }

  /** A function that does not sample takes only what greedy decoding gives. */
  private static void checkGreedy(String model, LanguageModel lm, ObjectNode sampling, int logprobs) {
    boolean greedy = sampling.get("temperature").asDouble() == 0 && sampling.get("presencePenalty").asDouble() == 0
        && sampling.get("frequencyPenalty").asDouble() == 0 && !sampling.has("logitBias") && logprobs < 0;
    if (!lm.sampling() && !greedy) {
      throw OpenAiError.unsupported("temperature", "the function '" + model
          + "' decodes greedily only: send temperature 0, no penalties, no logit_bias, no logprobs");
    }
  }

  private static List<String> stops(JsonNode stop) {
    List<String> out = new ArrayList<>();
    if (stop == null || stop.isNull()) {
      return out;
    }
    if (stop.isTextual()) {
      out.add(stop.asText());
    } else if (stop.isArray() && stop.size() <= MAX_STOPS) {
      for (JsonNode s : stop) {
        if (!s.isTextual()) {
          throw OpenAiError.invalid("'stop' holds strings, not " + s, "stop");
        }
        out.add(s.asText());
      }
    } else {
      throw OpenAiError.invalid("'stop' is a string or a list of at most " + MAX_STOPS + " strings", "stop");
    }
    out.removeIf(String::isEmpty);
    return out;
  }

  // ---- fields ----

  private static boolean bool(JsonNode body, String f, boolean fallback) {
    JsonNode v = body.get(f);
    if (v == null || v.isNull()) {
      return fallback;
    }
    if (!v.isBoolean()) {
      throw OpenAiError.invalid("'" + f + "' must be true or false, not " + v, f);
    }
    return v.asBoolean();
  }

  private static Integer optionalInt(JsonNode body, String f, int min, int max) {
    JsonNode v = body.get(f);
    if (v == null || v.isNull()) {
      return null;
    }
    if (!v.isIntegralNumber() || !v.canConvertToInt() || v.asInt() < min || v.asInt() > max) {
      throw OpenAiError.invalid("'" + f + "' must be an integer of at least " + min + (max < Integer.MAX_VALUE
          ? " and at most " + max : "") + ", not " + v, f);
    }
    return v.asInt();
  }

  private static int intOr(JsonNode body, String f, int fallback, int min, int max) {
    Integer v = optionalInt(body, f, min, max);
    return v == null ? fallback : v;
  }

  private static long longOf(JsonNode body, String f) {
    JsonNode v = body.get(f);
    if (!v.isIntegralNumber() || !v.canConvertToLong()) {
      throw OpenAiError.invalid("'" + f + "' must be an integer, not " + v, f);
    }
    return v.asLong();
  }

  private static double number(JsonNode body, String f, double fallback, double min, double max) {
    JsonNode v = body.get(f);
    if (v == null || v.isNull()) {
      return fallback;
    }
    if (!v.isNumber() || v.asDouble() < min || v.asDouble() > max) {
      throw OpenAiError.invalid("'" + f + "' must be a number in [" + fmt(min) + ", " + fmt(max) + "], not " + v, f);
    }
    return v.asDouble();
  }

  private static String fmt(double d) {
    return d == Math.rint(d) ? Long.toString((long) d) : Double.toString(d);
  }
}
