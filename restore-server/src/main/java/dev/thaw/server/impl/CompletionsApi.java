package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.knuddels.jtokkit.Encodings;
import com.knuddels.jtokkit.api.Encoding;
import com.knuddels.jtokkit.api.EncodingRegistry;
import com.knuddels.jtokkit.api.IntArrayList;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSignature;
import dev.thaw.server.ServeException;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * OpenAI-compatible {@code POST /v1/completions} for functions that declare a language model: greedy decoding
 * only, so sampling parameters other than their greedy values are refused with 400, as are unknown models.
 * Text goes through the model's tokenizer (jtokkit; GPT-2's is {@code r50k_base}); a prompt may also be token ids.
 *
 * <p>{@code stream: true} answers with server-sent events, one per token, then {@code data: [DONE]}. The function
 * generates a whole completion in one invoke, so the events are sent when it returns: streaming keeps clients
 * that expect it working; it does not bring the first token sooner.
 */
final class CompletionsApi {

  static final int DEFAULT_MAX_TOKENS = 16;
  private static final Set<String> FIELDS = Set.of("model", "prompt", "max_tokens", "temperature", "top_p", "n",
      "best_of", "stream", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "user",
      "suffix", "seed", "stream_options");
  private static final EncodingRegistry ENCODINGS = Encodings.newLazyEncodingRegistry();

  private final Scheduler scheduler;
  private final Http http;
  private final Map<String, Encoding> encodings = new ConcurrentHashMap<>();
  private final AtomicLong ids = new AtomicLong();

  CompletionsApi(Scheduler scheduler, Http http) {
    this.scheduler = scheduler;
    this.http = http;
  }

  void routes(Router router) {
    router.post("/v1/completions").handler(ctx -> {
      try {
        complete(ctx);
      } catch (RuntimeException e) {
        sendError(ctx, e);
      }
    });
  }

  private void complete(RoutingContext ctx) {
    JsonNode body = http.json(ctx);
    if (!body.isObject()) {
      throw invalid("the request is a JSON object", null, null);
    }
    for (Iterator<String> it = body.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!FIELDS.contains(f)) {
        throw invalid("unknown parameter '" + f + "'", f, "unknown_parameter");
      }
    }
    refuseUnlessDefault(body, "temperature", 0, "only greedy decoding (temperature 0) is supported");
    refuseUnlessDefault(body, "top_p", 1, "only greedy decoding is supported; top_p must be 1");
    refuseUnlessDefault(body, "n", 1, "one completion per prompt: n must be 1");
    refuseUnlessDefault(body, "best_of", 1, "best_of must be 1");
    refuseUnlessDefault(body, "presence_penalty", 0, "presence_penalty is not supported");
    refuseUnlessDefault(body, "frequency_penalty", 0, "frequency_penalty is not supported");
    for (String f : List.of("logprobs", "stop", "suffix")) {
      if (body.hasNonNull(f)) {
        throw invalid("'" + f + "' is not supported", f, "unsupported_parameter");
      }
    }
    if (body.path("echo").asBoolean(false)) {
      throw invalid("'echo' is not supported", "echo", "unsupported_parameter");
    }
    if (body.has("logit_bias") && !body.get("logit_bias").isNull() && !body.get("logit_bias").isEmpty()) {
      throw invalid("'logit_bias' is not supported", "logit_bias", "unsupported_parameter");
    }
    String model = body.path("model").asText(null);
    if (model == null || !body.get("model").isTextual()) {
      throw invalid("'model' names the function to run", "model", null);
    }
    ImageInfo image = scheduler.image(model)
        .orElseThrow(() -> invalid("the model '" + model + "' does not exist", "model", "model_not_found"));
    FunctionSignature.LanguageModel lm = image.signature().languageModel()
        .orElseThrow(() -> invalid("the function '" + model + "' is not a language model", "model",
            "model_not_supported"));
    Encoding encoding = encodings.computeIfAbsent(lm.encoding(), e -> ENCODINGS.getEncoding(e)
        .orElseThrow(() -> new ServeException(500, "no_tokenizer", "no tokenizer '" + e + "' for " + model)));
    int maxTokens = DEFAULT_MAX_TOKENS;
    if (body.hasNonNull("max_tokens")) {
      JsonNode m = body.get("max_tokens");
      if (!m.isIntegralNumber() || m.intValue() < 1) {
        throw invalid("'max_tokens' is a positive integer", "max_tokens", null);
      }
      maxTokens = m.intValue();
    }
    List<int[]> prompts = prompts(body.get("prompt"), encoding, lm);
    for (int[] p : prompts) {
      if (p.length + maxTokens > lm.contextLength()) {
        throw invalid("a prompt of " + p.length + " tokens plus max_tokens " + maxTokens + " exceeds the model's "
            + lm.contextLength() + " positions", "max_tokens", "context_length_exceeded");
      }
    }
    boolean stream = body.path("stream").asBoolean(false);

    ObjectNode request = Http.object();
    ArrayNode tokens = request.putArray("tokens");
    for (int[] p : prompts) {
      ArrayNode row = tokens.addArray();
      for (int t : p) {
        row.add(t);
      }
    }
    request.put("maxNewTokens", maxTokens);
    Scheduler.Pending pending = scheduler.submit(model, FunctionRequest.of(request));
    String id = "cmpl-thaw-" + ids.incrementAndGet();
    long created = System.currentTimeMillis() / 1000;
    Http.onInvocation(ctx, pending, (inv, e) -> {
      if (e != null) {
        sendError(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      NativeApi.timingHeaders(ctx, inv);
      List<int[]> generated = new ArrayList<>();
      for (JsonNode row : inv.response().json().path("tokens")) {
        int[] ids = new int[row.size()];
        for (int i = 0; i < ids.length; i++) {
          ids[i] = row.get(i).intValue();
        }
        generated.add(ids);
      }
      if (stream) {
        stream(ctx, id, created, model, encoding, generated);
      } else {
        ObjectNode out = Http.object();
        out.put("id", id).put("object", "text_completion").put("created", created).put("model", model);
        ArrayNode choices = out.putArray("choices");
        int promptTokens = 0;
        int completionTokens = 0;
        for (int i = 0; i < generated.size(); i++) {
          choices.addObject().put("text", encoding.decode(list(generated.get(i)))).put("index", i)
              .putNull("logprobs").put("finish_reason", "length");
          promptTokens += prompts.get(i).length;
          completionTokens += generated.get(i).length;
        }
        out.putObject("usage").put("prompt_tokens", promptTokens).put("completion_tokens", completionTokens)
            .put("total_tokens", promptTokens + completionTokens);
        Http.sendJson(ctx, 200, out);
      }
    });
  }

  private static void stream(RoutingContext ctx, String id, long created, String model, Encoding encoding,
      List<int[]> generated) {
    HttpServerResponse r = ctx.response();
    if (r.closed()) {
      return;
    }
    r.setChunked(true).putHeader("Content-Type", "text/event-stream").putHeader("Cache-Control", "no-cache");
    for (int i = 0; i < generated.size(); i++) {
      int[] ids = generated.get(i);
      String sent = "";
      for (int n = 1; n <= ids.length; n++) {
        String text = encoding.decode(list(java.util.Arrays.copyOf(ids, n)));
        boolean last = n == ids.length;
        // A token may end inside a UTF-8 character: hold its text back until the character is whole.
        if (!last && text.endsWith("\uFFFD")) {
          continue;
        }
        String delta = text.startsWith(sent) ? text.substring(sent.length()) : text;
        sent = text;
        ObjectNode chunk = Http.object();
        chunk.put("id", id).put("object", "text_completion").put("created", created).put("model", model);
        ObjectNode choice = chunk.putArray("choices").addObject().put("text", delta).put("index", i);
        choice.putNull("logprobs");
        if (last) {
          choice.put("finish_reason", "length");
        } else {
          choice.putNull("finish_reason");
        }
        r.write("data: " + chunk + "\n\n");
      }
    }
    r.end("data: [DONE]\n\n");
  }

  private static List<int[]> prompts(JsonNode prompt, Encoding encoding, FunctionSignature.LanguageModel lm) {
    List<int[]> out = new ArrayList<>();
    if (prompt == null || prompt.isNull()) {
      throw invalid("'prompt' is required: text, a list of texts, token ids or a list of token id lists", "prompt",
          null);
    }
    if (prompt.isTextual()) {
      out.add(encoding.encode(prompt.asText()).toArray());
    } else if (prompt.isArray() && !prompt.isEmpty() && prompt.get(0).isIntegralNumber()) {
      out.add(ids(prompt, lm));
    } else if (prompt.isArray() && !prompt.isEmpty()) {
      for (JsonNode p : prompt) {
        if (p.isTextual()) {
          out.add(encoding.encode(p.asText()).toArray());
        } else if (p.isArray()) {
          out.add(ids(p, lm));
        } else {
          throw invalid("'prompt' holds texts or lists of token ids, not " + p.getNodeType(), "prompt", null);
        }
      }
    } else {
      throw invalid("'prompt' is text, a list of texts, token ids or a list of token id lists", "prompt", null);
    }
    for (int[] p : out) {
      if (p.length == 0) {
        throw invalid("a prompt is empty", "prompt", null);
      }
    }
    return out;
  }

  private static int[] ids(JsonNode array, FunctionSignature.LanguageModel lm) {
    int[] ids = new int[array.size()];
    for (int i = 0; i < ids.length; i++) {
      JsonNode t = array.get(i);
      if (!t.isIntegralNumber() || t.longValue() < 0 || t.longValue() >= lm.vocabSize()) {
        throw invalid("token " + t + " is not an id below the vocabulary size " + lm.vocabSize(), "prompt", null);
      }
      ids[i] = t.intValue();
    }
    return ids;
  }

  private static IntArrayList list(int[] ids) {
    IntArrayList l = new IntArrayList(ids.length);
    for (int id : ids) {
      l.add(id);
    }
    return l;
  }

  private static void refuseUnlessDefault(JsonNode body, String field, double greedy, String message) {
    JsonNode v = body.get(field);
    if (v != null && !v.isNull() && !(v.isNumber() && v.doubleValue() == greedy)) {
      throw invalid(message + " (got " + field + " = " + v + ")", field, "unsupported_parameter");
    }
  }

  static ServeException invalid(String message, String param, String code) {
    return new OpenAiError(400, message, param, code);
  }

  /** An error with the OpenAI API's fields. */
  static final class OpenAiError extends ServeException {
    final String param;

    OpenAiError(int status, String message, String param, String code) {
      super(status, code == null ? "invalid_request_error" : code, message);
      this.param = param;
    }
  }

  /**
   * {@code {"error": {"message", "type", "param", "code", "requestId"}}}, as OpenAI's API writes errors (with the
   * request's id, as every error of the server has it).
   */
  static void sendError(RoutingContext ctx, Throwable failure) {
    if (ctx.response().ended() || ctx.response().closed()) {
      return;
    }
    Http.ClientError e = Http.clientError(ctx, failure);
    if (e.retryAfterSeconds() > 0) {
      ctx.response().putHeader("Retry-After", Long.toString(e.retryAfterSeconds()));
    }
    ObjectNode error = Http.object();
    ObjectNode inner = error.putObject("error");
    inner.put("message", e.message());
    inner.put("type", e.status() >= 500 ? "server_error" : "invalid_request_error");
    if (Http.unwrap(failure) instanceof OpenAiError o && o.param != null) {
      inner.put("param", o.param);
    } else {
      inner.putNull("param");
    }
    inner.put("code", e.code());
    inner.put("requestId", Http.requestId(ctx));
    Http.sendJson(ctx, e.status(), error);
  }
}
