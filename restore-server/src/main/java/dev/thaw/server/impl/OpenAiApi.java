package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSignature.LanguageModel;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.Tokenizer;
import dev.thaw.runtime.text.TemplateException;
import dev.thaw.server.ServeException;
import io.vertx.core.Context;
import io.vertx.core.Vertx;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Executor;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * OpenAI-compatible endpoints for functions that declare a language model: {@code POST /v1/completions},
 * {@code POST /v1/chat/completions} (the model's chat template), {@code GET /v1/models[/{id}]}, and OpenAI's error
 * object for every failure, unknown {@code /v1} paths included. Text goes through the model's tokenizer; sampling,
 * penalties, the logit bias and log-probabilities are the function's ({@code Sampling}); stop strings, echo, usage
 * and the response's shape are here. A request with {@code n} completions of p prompts is one function request of
 * n × p sequences, each drawing from the request's seed by its own index.
 */
final class OpenAiApi {

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
  private static final Set<String> ROLES = Set.of("system", "developer", "user", "assistant", "tool");

  private static final ObjectMapper PLAIN =
      new ObjectMapper();

  private final Scheduler scheduler;
  private final Http http;
  private final TextModels text;
  private final AtomicLong ids = new AtomicLong(ThreadLocalRandom.current().nextLong(1L << 40));

  OpenAiApi(Scheduler scheduler, Http http) {
    this.scheduler = scheduler;
    this.http = http;
    this.text = new TextModels(LOADER);
  }

  /** Reads tokenizers and templates (files, parsing) off the event loops; its threads end with the process. */
  private static final Executor LOADER = Executors.newCachedThreadPool(r -> {
    Thread t = new Thread(r, "thaw-text-loader");
    t.setDaemon(true);
    return t;
  });

  private static Set<String> union(Set<String> a, String... more) {
    Set<String> s = new HashSet<>(a);
    s.addAll(List.of(more));
    return Set.copyOf(s);
  }

  void routes(Router router) {
    router.post("/v1/completions").handler(ctx -> guard(ctx, () -> generate(ctx, false)));
    router.post("/v1/chat/completions").handler(ctx -> guard(ctx, () -> generate(ctx, true)));
    Endpoints.get(router, "/v1/models").handler(ctx -> guard(ctx, () -> models(ctx)));
    Endpoints.get(router, "/v1/models/:id").handler(ctx -> guard(ctx, () -> model(ctx)));
  }

  /** True for the paths whose errors are OpenAI's ({@code /v1} but the native API's {@code /v1/functions}). */
  static boolean owns(String path) {
    return path.startsWith("/v1/") && !path.startsWith("/v1/functions");
  }

  /** An unknown {@code /v1} path: 404 in OpenAI's shape. */
  static void notFound(RoutingContext ctx) {
    sendError(ctx, new OpenAiError(404, "invalid_request_error", "unknown_url", null, "Invalid URL ("
        + ctx.request().method() + " " + ctx.request().path() + ")"));
  }

  private static void guard(RoutingContext ctx, Runnable body) {
    try {
      body.run();
    } catch (RuntimeException e) {
      sendError(ctx, e);
    }
  }

  // ---- models ----

  private void models(RoutingContext ctx) {
    ObjectNode out = Http.object().put("object", "list");
    ArrayNode data = out.putArray("data");
    for (String name : scheduler.names()) {
      scheduler.image(name).filter(i -> i.signature().languageModel().isPresent())
          .ifPresent(i -> data.add(model(name, i)));
    }
    Http.sendJson(ctx, 200, out);
  }

  private void model(RoutingContext ctx) {
    String id = ctx.pathParam("id");
    ImageInfo image = scheduler.image(id).filter(i -> i.signature().languageModel().isPresent())
        .orElseThrow(() -> modelNotFound(id));
    Http.sendJson(ctx, 200, model(id, image));
  }

  private static ObjectNode model(String name, ImageInfo image) {
    LanguageModel lm = image.signature().languageModel().orElseThrow();
    ObjectNode m = Http.object().put("id", name).put("object", "model")
        .put("created", Instant.parse(image.manifest().build().created()).getEpochSecond()).put("owned_by", "thaw");
    m.put("root", image.tag()).put("max_model_len", lm.contextLength());
    return m;
  }

  /** 404 {@code model_not_found}, as OpenAI answers a model it does not serve. */
  static OpenAiError modelNotFound(String id) {
    return new OpenAiError(404, "invalid_request_error", "model_not_found", "model", "The model '" + id
        + "' does not exist");
  }

  // ---- completions and chat ----

  /** What a request asks, checked, before its prompt is known. */
  private record Ask(String model, ImageInfo image, LanguageModel lm, boolean chat, Integer maxTokens, int n,
      boolean stream, boolean includeUsage, List<String> stops, boolean echo, int logprobs, ObjectNode sampling) {}

  private void generate(RoutingContext ctx, boolean chat) {
    JsonNode body = http.json(ctx);
    if (!body.isObject()) {
      throw invalid("the request body must be a JSON object", null);
    }
    Ask ask = ask(body, chat);
    text.of(ask.image(), ask.lm()).whenComplete((t, e) -> ctx.vertx().runOnContext(v -> guard(ctx, () -> {
      if (e != null) {
        throw e instanceof RuntimeException r ? r : new RuntimeException(e);
      }
      run(ctx, body, ask, t);
    })));
  }

  private Ask ask(JsonNode body, boolean chat) {
    Set<String> known = chat ? CHAT_FIELDS : COMPLETION_FIELDS;
    for (Iterator<String> it = body.fieldNames(); it.hasNext(); ) {
      String f = it.next();
      if (!known.contains(f)) {
        throw invalid("Unrecognized request argument supplied: " + f, f);
      }
    }
    JsonNode m = body.get("model");
    if (m == null || !m.isTextual()) {
      throw invalid("'model' is required: the name of a function", "model");
    }
    String model = m.asText();
    ImageInfo image = scheduler.image(model).orElseThrow(() -> modelNotFound(model));
    LanguageModel lm = image.signature().languageModel().orElseThrow(() -> new OpenAiError(400,
        "invalid_request_error", "model_not_supported", "model", "The function '" + model
        + "' is not a language model"));
    for (String f : List.of("suffix", "tools", "functions", "tool_choice", "function_call")) {
      if (body.hasNonNull(f)) {
        throw new OpenAiError(400, "invalid_request_error", "unsupported_parameter", f, "'" + f
            + "' is not supported");
      }
    }
    JsonNode format = body.get("response_format");
    if (format != null && !format.isNull() && !format.path("type").asText().equals("text")) {
      throw new OpenAiError(400, "invalid_request_error", "unsupported_parameter", "response_format",
          "only response_format {\"type\": \"text\"} is supported");
    }
    Integer maxTokens = optionalInt(body, chat && body.hasNonNull("max_completion_tokens") ? "max_completion_tokens"
        : "max_tokens", 1, Integer.MAX_VALUE);
    int n = intOr(body, "n", 1, 1, MAX_N);
    if (!chat && body.hasNonNull("best_of") && intOr(body, "best_of", n, 1, MAX_N) != n) {
      throw new OpenAiError(400, "invalid_request_error", "unsupported_parameter", "best_of",
          "best_of must equal n: completions are not ranked");
    }
    boolean stream = bool(body, "stream", false);
    boolean includeUsage = false;
    JsonNode so = body.get("stream_options");
    if (so != null && !so.isNull()) {
      if (!stream) {
        throw invalid("'stream_options' is only allowed when 'stream' is true", "stream_options");
      }
      if (!so.isObject()) {
        throw invalid("'stream_options' must be an object", "stream_options");
      }
      includeUsage = bool(so, "include_usage", false);
    }
    List<String> stops = stops(body.get("stop"));
    boolean echo = !chat && bool(body, "echo", false);
    int logprobs = -1;
    if (chat) {
      if (bool(body, "logprobs", false)) {
        logprobs = intOr(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS);
      } else if (body.hasNonNull("top_logprobs")) {
        throw invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
      }
    } else if (body.hasNonNull("logprobs")) {
      logprobs = intOr(body, "logprobs", 0, 0, MAX_COMPLETION_LOGPROBS);
    }
    if (echo && logprobs >= 0) {
      throw new OpenAiError(400, "invalid_request_error", "unsupported_parameter", "echo",
          "'echo' with 'logprobs' (the prompt's log-probabilities) is not supported");
    }
    ObjectNode sampling = Http.object();
    sampling.put("temperature", number(body, "temperature", 1, 0, 2));
    sampling.put("topP", number(body, "top_p", 1, 0, 1));
    if (sampling.get("topP").asDouble() == 0) {
      throw invalid("'top_p' must be in (0, 1]", "top_p");
    }
    int topK = intOr(body, "top_k", 0, -1, lm.vocabSize());
    sampling.put("topK", Math.max(0, topK));
    sampling.put("presencePenalty", number(body, "presence_penalty", 0, -2, 2));
    sampling.put("frequencyPenalty", number(body, "frequency_penalty", 0, -2, 2));
    sampling.put("seed", body.hasNonNull("seed") ? longOf(body, "seed") : ThreadLocalRandom.current().nextLong());
    JsonNode bias = body.get("logit_bias");
    if (bias != null && !bias.isNull()) {
      if (!bias.isObject()) {
        throw invalid("'logit_bias' must map token ids to biases in [-100, 100]", "logit_bias");
      }
      ObjectNode b = sampling.putObject("logitBias");
      for (Iterator<Map.Entry<String, JsonNode>> it = bias.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        if (!e.getKey().matches("[0-9]{1,9}") || Integer.parseInt(e.getKey()) >= lm.vocabSize()
            || !e.getValue().isNumber() || Math.abs(e.getValue().asDouble()) > 100) {
          throw invalid("'logit_bias' maps token ids below " + lm.vocabSize() + " to biases in [-100, 100], not "
              + e.getKey() + ": " + e.getValue(), "logit_bias");
        }
        b.put(e.getKey(), e.getValue().asDouble());
      }
    }
    boolean greedy = sampling.get("temperature").asDouble() == 0 && sampling.get("presencePenalty").asDouble() == 0
        && sampling.get("frequencyPenalty").asDouble() == 0 && !sampling.has("logitBias") && logprobs < 0;
    if (!lm.sampling() && !greedy) {
      throw new OpenAiError(400, "invalid_request_error", "unsupported_parameter", "temperature", "the function '"
          + model + "' decodes greedily only: send temperature 0, no penalties, no logit_bias, no logprobs");
    }
    return new Ask(model, image, lm, chat, maxTokens, n, stream, includeUsage, stops, echo, logprobs, sampling);
  }

  private void run(RoutingContext ctx, JsonNode body, Ask ask, TextModels.Text t) {
    Tokenizer tokenizer = t.tokenizer();
    List<int[]> prompts = new ArrayList<>();
    List<String> promptTexts = new ArrayList<>();
    if (ask.chat()) {
      if (tokenizer == null) {
        throw invalid("the model '" + ask.model() + "' has no tokenizer: chat needs one", "model");
      }
      if (t.chat() == null) {
        throw invalid("the model '" + ask.model() + "' has no chat template" + (ask.lm().chat() != null
            ? " this server reads" : "") + ": use /v1/completions", "messages");
      }
      String prompt = render(t, ask.lm(), body.get("messages"));
      prompts.add(tokenizer.encode(prompt, false));
      promptTexts.add(prompt);
    } else {
      prompts(body.get("prompt"), tokenizer, ask.lm(), prompts, promptTexts);
    }
    int sequences = prompts.size() * ask.n();
    if (sequences > ask.lm().maxBatch()) {
      throw invalid(prompts.size() + " prompt(s) × n " + ask.n() + " = " + sequences + " sequences; the model '"
          + ask.model() + "' takes at most " + ask.lm().maxBatch() + " in one request", "n");
    }
    int longest = 0;
    for (int[] p : prompts) {
      if (p.length >= ask.lm().contextLength()) {
        throw new OpenAiError(400, "invalid_request_error", "context_length_exceeded", ask.chat() ? "messages"
            : "prompt", "This model's maximum context length is " + ask.lm().contextLength() + " tokens; the prompt "
            + "has " + p.length);
      }
      longest = Math.max(longest, p.length);
    }
    int maxTokens = ask.maxTokens() == null ? ask.lm().contextLength() - longest : ask.maxTokens();
    if (longest + maxTokens > ask.lm().contextLength()) {
      throw new OpenAiError(400, "invalid_request_error", "context_length_exceeded", ask.chat()
          ? "max_completion_tokens" : "max_tokens", "This model's maximum context length is "
          + ask.lm().contextLength() + " tokens; the prompt has " + longest + " and max_tokens asks for " + maxTokens
          + " more");
    }
    if (ask.stops().size() > 0 && tokenizer == null) {
      throw invalid("'stop' needs the model's tokenizer, which it has none of", "stop");
    }

    ObjectNode request = Http.object();
    ArrayNode rows = request.putArray("tokens");
    for (int[] p : prompts) {
      for (int i = 0; i < ask.n(); i++) {
        ArrayNode row = rows.addArray();
        for (int id : p) {
          row.add(id);
        }
      }
    }
    request.put("maxNewTokens", maxTokens);
    if (ask.lm().sampling()) {
      request.setAll(ask.sampling());
      if (ask.logprobs() >= 0) {
        request.put("logprobs", ask.logprobs());
      }
      if (!ask.lm().stopTokens().isEmpty()) {
        ArrayNode stops = request.putArray("stopTokens");
        ask.lm().stopTokens().forEach(stops::add);
      }
    }
    String id = (ask.chat() ? "chatcmpl-" : "cmpl-") + Long.toHexString(ids.incrementAndGet());
    long created = System.currentTimeMillis() / 1000;
    if (ask.stream()) {
      Events events = new Events(ctx, id, created, ask, tokenizer, promptTexts, prompts);
      Context context = Vertx.currentContext();
      ResponseStream stream = ResponseStream.streamed(part -> context.runOnContext(v -> events.part(part)));
      events.stream = stream;
      Http.onInvocation(ctx, scheduler.submit(ask.model(), FunctionRequest.of(request), stream), events::done);
      return;
    }
    Scheduler.Pending pending = scheduler.submit(ask.model(), FunctionRequest.of(request));
    Http.onInvocation(ctx, pending, (inv, e) -> {
      if (e != null) {
        sendError(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      NativeApi.timingHeaders(ctx, inv);
      List<Choice> choices = choices(inv.response().json(), tokenizer, ask, prompts, promptTexts);
      int promptTokens = prompts.stream().mapToInt(p -> p.length).sum();
      int completionTokens = choices.stream().mapToInt(c -> c.tokens).sum();
      ObjectNode usage = Http.object().put("prompt_tokens", promptTokens).put("completion_tokens", completionTokens)
          .put("total_tokens", promptTokens + completionTokens);
      ObjectNode out = Http.object();
      out.put("id", id).put("object", ask.chat() ? "chat.completion" : "text_completion").put("created", created)
          .put("model", ask.model());
      ArrayNode cs = out.putArray("choices");
      for (Choice c : choices) {
        cs.add(ask.chat() ? chatChoice(c, tokenizer, ask) : completionChoice(c, tokenizer, ask));
      }
      out.set("usage", usage);
      Http.sendJson(ctx, 200, out);
    });
  }

  /** One completion: its prompt's text (for echo), its tokens as the function made them, its text and end. */
  private static final class Choice {
    int index;
    String prompt;
    int[] ids;
    String text;
    String finish;
    int tokens;
    JsonNode logprobs;
  }

  private static List<Choice> choices(JsonNode response, Tokenizer tokenizer, Ask ask, List<int[]> prompts,
      List<String> promptTexts) {
    List<Choice> out = new ArrayList<>();
    JsonNode tokens = response.path("tokens");
    for (int i = 0; i < tokens.size(); i++) {
      JsonNode row = tokens.get(i);
      Choice c = new Choice();
      c.index = i;
      c.prompt = promptTexts.get(i / ask.n());
      int[] ids = new int[row.size()];
      for (int k = 0; k < ids.length; k++) {
        ids[k] = row.get(k).asInt();
      }
      c.finish = response.path("finish").path(i).asText("length");
      c.logprobs = response.path("logprobs").path(i);
      if (tokenizer == null) {
        c.ids = ids;
        c.text = "";
        c.tokens = ids.length;
      } else {
        ChoiceText t = new ChoiceText(tokenizer, ask.stops());
        for (int id : ids) {
          t.add(id);
        }
        t.flush();
        c.text = t.text();
        c.tokens = t.tokens();
        c.ids = Arrays.copyOf(ids, c.tokens);
        if (t.stopped()) {
          c.finish = "stop";
        }
      }
      out.add(c);
    }
    return out;
  }

  private static ObjectNode completionChoice(Choice c, Tokenizer tokenizer, Ask ask) {
    ObjectNode o = Http.object();
    o.put("text", ask.echo() ? c.prompt + c.text : c.text).put("index", c.index);
    if (ask.logprobs() >= 0 && tokenizer != null) {
      ObjectNode lp = o.putObject("logprobs");
      ArrayNode tokens = lp.putArray("tokens");
      ArrayNode tokenLogprobs = lp.putArray("token_logprobs");
      ArrayNode top = lp.putArray("top_logprobs");
      ArrayNode offsets = lp.putArray("text_offset");
      int offset = 0;
      for (int k = 0; k < c.ids.length; k++) {
        String s = ChoiceText.tokenString(tokenizer, c.ids[k]);
        tokens.add(s);
        JsonNode p = c.logprobs.path(k);
        tokenLogprobs.add(p.path("logprob").asDouble());
        ObjectNode alternatives = top.addObject();
        for (JsonNode a : p.path("top")) {
          alternatives.put(ChoiceText.tokenString(tokenizer, a.get(0).asInt()), a.get(1).asDouble());
        }
        offsets.add(offset);
        offset += s.length();
      }
    } else {
      o.putNull("logprobs");
    }
    o.put("finish_reason", c.finish);
    return o;
  }

  private static ObjectNode chatChoice(Choice c, Tokenizer tokenizer, Ask ask) {
    ObjectNode o = Http.object().put("index", c.index);
    o.putObject("message").put("role", "assistant").put("content", c.text);
    if (ask.logprobs() >= 0) {
      o.putObject("logprobs").set("content", chatLogprobs(c, tokenizer, 0, c.ids.length));
    } else {
      o.putNull("logprobs");
    }
    o.put("finish_reason", c.finish);
    return o;
  }

  private static ArrayNode chatLogprobs(Choice c, Tokenizer tokenizer, int from, int to) {
    ArrayNode content = Http.object().arrayNode();
    for (int k = from; k < to; k++) {
      JsonNode p = c.logprobs.path(k);
      ObjectNode t = content.addObject();
      token(t, tokenizer, c.ids[k], p.path("logprob").asDouble());
      ArrayNode top = t.putArray("top_logprobs");
      for (JsonNode a : p.path("top")) {
        token(top.addObject(), tokenizer, a.get(0).asInt(), a.get(1).asDouble());
      }
    }
    return content;
  }

  private static void token(ObjectNode into, Tokenizer tokenizer, int id, double logprob) {
    into.put("token", ChoiceText.tokenString(tokenizer, id)).put("logprob", logprob);
    ArrayNode bytes = into.putArray("bytes");
    for (byte b : tokenizer.bytes(id)) {
      bytes.add(b & 0xff);
    }
  }

  /**
   * A streamed request's server-sent events, written on its event loop as the function's parts arrive: first, per
   * choice, a chat's role (or a completion's echoed prompt); then each token's text as a delta once it is safe to send
   * ({@link ChoiceText}: never half a character, never the start of a stop string), with its log-probabilities when
   * asked; a choice's finish when it ends; with {@code include_usage} a last chunk with the usage and no choices; then
   * {@code [DONE]}. Tokens the response holds beyond the parts (a function that does not stream) are sent at its end.
   * When every choice has ended at a stop string the request is cancelled: the function stops generating. A failure
   * after the first event is an {@code error} event, since the status is gone.
   */
  private static final class Events {
    private final RoutingContext ctx;
    private final String id;
    private final long created;
    private final Ask ask;
    private final Tokenizer tokenizer;
    private final List<String> promptTexts;
    private final int promptTokens;
    private final ChoiceText[] texts;
    /** Per choice: tokens seen, whether its finish was sent, the length of its text in log-probability offsets. */
    private final int[] seen;
    private final boolean[] ended;
    private final int[] offsets;
    /** The request's stream, cancelled once every choice ended at a stop string. */
    ResponseStream stream;
    private boolean started;

    Events(RoutingContext ctx, String id, long created, Ask ask, Tokenizer tokenizer, List<String> promptTexts,
        List<int[]> prompts) {
      this.ctx = ctx;
      this.id = id;
      this.created = created;
      this.ask = ask;
      this.tokenizer = tokenizer;
      this.promptTexts = promptTexts;
      this.promptTokens = prompts.stream().mapToInt(p -> p.length).sum();
      int choices = prompts.size() * ask.n();
      this.texts = new ChoiceText[choices];
      this.seen = new int[choices];
      this.ended = new boolean[choices];
      this.offsets = new int[choices];
      for (int i = 0; i < choices; i++) {
        texts[i] = tokenizer == null ? null : new ChoiceText(tokenizer, ask.stops());
      }
    }

    private boolean gone() {
      return ctx.response().closed() || ctx.response().ended();
    }

    /** One part of the function's response: per sequence, the ids it added (and their log-probabilities). */
    void part(JsonNode part) {
      if (gone()) {
        return;
      }
      start();
      JsonNode tokens = part.path("tokens");
      for (int i = 0; i < Math.min(tokens.size(), texts.length); i++) {
        JsonNode added = tokens.get(i);
        for (int k = 0; k < added.size(); k++) {
          token(i, added.get(k).asInt(), part.path("logprobs").path(i).path(k));
        }
      }
      boolean all = true;
      for (boolean e : ended) {
        all &= e;
      }
      if (all) {
        stream.cancel();
      }
    }

    private void token(int i, int tokenId, JsonNode logprob) {
      seen[i]++;
      if (ended[i]) {
        return;
      }
      String delta = texts[i] == null ? "" : texts[i].add(tokenId);
      JsonNode lp = ask.logprobs() < 0 || tokenizer == null ? null : logprobs(tokenId, logprob, i);
      if (!delta.isEmpty() || lp != null) {
        send(delta(delta, lp, i, null));
      }
      if (texts[i] != null && texts[i].stopped()) {
        ended[i] = true;
        send(delta("", null, i, "stop"));
      }
    }

    /** This token's log-probabilities in the chunk's form (chat: {@code content}; completions: OpenAI's lists). */
    private JsonNode logprobs(int tokenId, JsonNode p, int i) {
      String s = ChoiceText.tokenString(tokenizer, tokenId);
      if (ask.chat()) {
        ArrayNode content = Http.object().arrayNode();
        ObjectNode t = content.addObject();
        OpenAiApi.token(t, tokenizer, tokenId, p.path("logprob").asDouble());
        ArrayNode top = t.putArray("top_logprobs");
        for (JsonNode a : p.path("top")) {
          OpenAiApi.token(top.addObject(), tokenizer, a.get(0).asInt(), a.get(1).asDouble());
        }
        return Http.object().set("content", content);
      }
      ObjectNode lp = Http.object();
      lp.putArray("tokens").add(s);
      lp.putArray("token_logprobs").add(p.path("logprob").asDouble());
      ObjectNode alternatives = lp.putArray("top_logprobs").addObject();
      for (JsonNode a : p.path("top")) {
        alternatives.put(ChoiceText.tokenString(tokenizer, a.get(0).asInt()), a.get(1).asDouble());
      }
      lp.putArray("text_offset").add(offsets[i]);
      offsets[i] += s.length();
      return lp;
    }

    /** The answer: the tokens no part carried, each unfinished choice's rest and finish, the usage, {@code [DONE]}. */
    void done(Invocation inv, Throwable failure) {
      if (failure != null) {
        if (!started) {
          sendError(ctx, failure);
        } else if (!gone()) {
          ServeException e = Http.asServeException(failure);
          ObjectNode error = Http.object();
          error.putObject("error").put("message", e.getMessage()).put("type", e.status() >= 500 ? "server_error"
              : "invalid_request_error").putNull("param").put("code", e.code());
          send(error);
          ctx.response().end();
        }
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      if (gone()) {
        return;
      }
      if (!started) {
        NativeApi.timingHeaders(ctx, inv);
      }
      start();
      JsonNode response = inv.response().json();
      int completionTokens = 0;
      for (int i = 0; i < texts.length; i++) {
        JsonNode row = response.path("tokens").path(i);
        for (int k = seen[i]; k < row.size(); k++) {
          token(i, row.get(k).asInt(), response.path("logprobs").path(i).path(k));
        }
        completionTokens += texts[i] == null ? seen[i] : texts[i].tokens();
        if (!ended[i]) {
          String rest = texts[i] == null ? "" : texts[i].flush();
          if (!rest.isEmpty()) {
            send(delta(rest, null, i, null));
          }
          ended[i] = true;
          send(delta("", null, i, texts[i] != null && texts[i].stopped() ? "stop"
              : response.path("finish").path(i).asText("length")));
        }
      }
      if (ask.includeUsage()) {
        ObjectNode last = chunk(true);
        last.putObject("usage").put("prompt_tokens", promptTokens).put("completion_tokens", completionTokens)
            .put("total_tokens", promptTokens + completionTokens);
        send(last);
      }
      ctx.response().end("data: [DONE]\n\n");
    }

    /** The headers, then per choice a chat's role or a completion's echoed prompt. */
    private void start() {
      if (started) {
        return;
      }
      started = true;
      ctx.response().setChunked(true).putHeader("Content-Type", "text/event-stream")
          .putHeader("Cache-Control", "no-cache");
      for (int i = 0; i < texts.length; i++) {
        if (ask.chat()) {
          ObjectNode first = chunk(false);
          ObjectNode choice = ((ArrayNode) first.get("choices")).addObject().put("index", i);
          choice.putObject("delta").put("role", "assistant").put("content", "");
          choice.putNull("logprobs").putNull("finish_reason");
          send(first);
        } else if (ask.echo()) {
          send(delta(promptTexts.get(i / ask.n()), null, i, null));
        }
      }
    }

    private ObjectNode chunk(boolean usageChunk) {
      return OpenAiApi.chunk(id, created, ask, usageChunk);
    }

    private ObjectNode delta(String text, JsonNode logprobs, int index, String finish) {
      ObjectNode chunk = chunk(false);
      ObjectNode choice = ((ArrayNode) chunk.get("choices")).addObject().put("index", index);
      if (ask.chat()) {
        ObjectNode d = choice.putObject("delta");
        if (finish == null) {
          d.put("content", text);
        }
      } else {
        choice.put("text", text);
      }
      if (logprobs == null) {
        choice.putNull("logprobs");
      } else {
        choice.set("logprobs", logprobs);
      }
      if (finish == null) {
        choice.putNull("finish_reason");
      } else {
        choice.put("finish_reason", finish);
      }
      return chunk;
    }

    private void send(JsonNode chunk) {
      if (!gone()) {
        ctx.response().write("data: " + chunk + "\n\n");
      }
    }
  }

  private static ObjectNode chunk(String id, long created, Ask ask, boolean usageChunk) {
    ObjectNode chunk = Http.object();
    chunk.put("id", id).put("object", ask.chat() ? "chat.completion.chunk" : "text_completion")
        .put("created", created).put("model", ask.model());
    chunk.putArray("choices");
    if (ask.includeUsage() && !usageChunk) {
      chunk.putNull("usage");
    }
    return chunk;
  }

  // ---- prompts ----

  private static String render(TextModels.Text t, LanguageModel lm, JsonNode messages) {
    if (messages == null || !messages.isArray() || messages.isEmpty()) {
      throw invalid("'messages' must be a non-empty list of messages", "messages");
    }
    List<Map<String, Object>> list = new ArrayList<>();
    for (int i = 0; i < messages.size(); i++) {
      JsonNode m = messages.get(i);
      String where = "messages[" + i + "]";
      if (!m.isObject()) {
        throw invalid(where + " must be an object with 'role' and 'content'", where);
      }
      String role = m.path("role").asText(null);
      if (role == null || !m.get("role").isTextual() || !ROLES.contains(role)) {
        throw invalid(where + ".role must be one of " + ROLES, where + ".role");
      }
      Map<String, Object> message = new LinkedHashMap<>();
      m.fields().forEachRemaining(e -> message.put(e.getKey(), PLAIN.convertValue(e.getValue(), Object.class)));
      // Chat templates are written for system, user, assistant and tool; OpenAI's developer role is a system one.
      message.put("role", role.equals("developer") ? "system" : role);
      message.put("content", content(m.get("content"), where, role));
      list.add(message);
    }
    try {
      return t.chat().render(list, true, lm.chat().specialTokens(), Map.of());
    } catch (TemplateException e) {
      if (e.raised()) {
        throw invalid("the model's chat template refused the messages: " + e.getMessage(), "messages");
      }
      throw new OpenAiError(500, "server_error", "chat_template_error", null, "the model's chat template failed: "
          + e.getMessage());
    }
  }

  /** A message's content as templates expect it: text (a list of text parts joined by newlines). */
  private static String content(JsonNode c, String where, String role) {
    if (c == null || c.isNull()) {
      if (role.equals("assistant")) {
        return "";
      }
      throw invalid(where + ".content is required", where + ".content");
    }
    if (c.isTextual()) {
      return c.asText();
    }
    if (c.isArray()) {
      List<String> parts = new ArrayList<>();
      for (JsonNode p : c) {
        if (!p.path("type").asText().equals("text") || !p.path("text").isTextual()) {
          throw invalid(where + ".content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
              where + ".content");
        }
        parts.add(p.get("text").asText());
      }
      return String.join("\n", parts);
    }
    throw invalid(where + ".content must be a string or a list of text parts", where + ".content");
  }

  private static void prompts(JsonNode prompt, Tokenizer tokenizer, LanguageModel lm, List<int[]> out,
      List<String> texts) {
    if (prompt == null || prompt.isNull()) {
      throw invalid("'prompt' is required: text, a list of texts, token ids or a list of token id lists", "prompt");
    }
    if (prompt.isTextual()) {
      addText(prompt.asText(), tokenizer, out, texts);
    } else if (prompt.isArray() && !prompt.isEmpty() && prompt.get(0).isIntegralNumber()) {
      out.add(ids(prompt, lm));
      texts.add(tokenizer == null ? "" : tokenizer.decode(out.get(out.size() - 1), false));
    } else if (prompt.isArray() && !prompt.isEmpty()) {
      for (JsonNode p : prompt) {
        if (p.isTextual()) {
          addText(p.asText(), tokenizer, out, texts);
        } else if (p.isArray() && !p.isEmpty()) {
          out.add(ids(p, lm));
          texts.add(tokenizer == null ? "" : tokenizer.decode(out.get(out.size() - 1), false));
        } else {
          throw invalid("'prompt' holds texts or non-empty lists of token ids, not " + p, "prompt");
        }
      }
    } else {
      throw invalid("'prompt' is text, a list of texts, token ids or a list of token id lists", "prompt");
    }
    for (int[] p : out) {
      if (p.length == 0) {
        throw invalid("a prompt is empty", "prompt");
      }
    }
  }

  private static void addText(String text, Tokenizer tokenizer, List<int[]> out, List<String> texts) {
    if (tokenizer == null) {
      throw invalid("this model has no tokenizer: send the prompt as token ids", "prompt");
    }
    out.add(tokenizer.encode(text, true));
    texts.add(text);
  }

  private static int[] ids(JsonNode array, LanguageModel lm) {
    int[] ids = new int[array.size()];
    for (int i = 0; i < ids.length; i++) {
      JsonNode t = array.get(i);
      if (!t.isIntegralNumber() || t.longValue() < 0 || t.longValue() >= lm.vocabSize()) {
        throw invalid("token " + t + " is not an id below the vocabulary size " + lm.vocabSize(), "prompt");
      }
      ids[i] = t.intValue();
    }
    return ids;
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
          throw invalid("'stop' holds strings, not " + s, "stop");
        }
        out.add(s.asText());
      }
    } else {
      throw invalid("'stop' is a string or a list of at most " + MAX_STOPS + " strings", "stop");
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
      throw invalid("'" + f + "' must be true or false, not " + v, f);
    }
    return v.asBoolean();
  }

  private static Integer optionalInt(JsonNode body, String f, int min, int max) {
    JsonNode v = body.get(f);
    if (v == null || v.isNull()) {
      return null;
    }
    if (!v.isIntegralNumber() || !v.canConvertToInt() || v.asInt() < min || v.asInt() > max) {
      throw invalid("'" + f + "' must be an integer of at least " + min + (max < Integer.MAX_VALUE ? " and at most "
          + max : "") + ", not " + v, f);
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
      throw invalid("'" + f + "' must be an integer, not " + v, f);
    }
    return v.asLong();
  }

  private static double number(JsonNode body, String f, double fallback, double min, double max) {
    JsonNode v = body.get(f);
    if (v == null || v.isNull()) {
      return fallback;
    }
    if (!v.isNumber() || v.asDouble() < min || v.asDouble() > max) {
      throw invalid("'" + f + "' must be a number in [" + fmt(min) + ", " + fmt(max) + "], not " + v, f);
    }
    return v.asDouble();
  }

  private static String fmt(double d) {
    return d == Math.rint(d) ? Long.toString((long) d) : Double.toString(d);
  }

  // ---- errors ----

  static OpenAiError invalid(String message, String param) {
    return new OpenAiError(400, "invalid_request_error", null, param, message);
  }

  /** An error with the fields of OpenAI's error object. */
  static final class OpenAiError extends ServeException {
    final String type;
    final String param;

    OpenAiError(int status, String type, String code, String param, String message) {
      super(status, code, message);
      this.type = type;
      this.param = param;
    }
  }

  /**
   * {@code {"error": {"message", "type", "param", "code", "requestId"}}} with the status OpenAI would use: 400 a bad
   * request, 404 an unknown model or path, 429 a full queue and 503 no capacity (both with {@code Retry-After}), 5xx
   * the server's. The message is the server's safe one ({@link Http#clientError}: a 5xx never carries a worker's
   * output), and the request's id is there as in every error of the server.
   */
  static void sendError(RoutingContext ctx, Throwable failure) {
    if (ctx.response().ended() || ctx.response().closed()) {
      return;
    }
    ServeException e = Http.asServeException(failure);
    Http.ClientError c = Http.clientError(ctx, failure);
    if (c.retryAfterSeconds() > 0) {
      ctx.response().putHeader("Retry-After", Long.toString(c.retryAfterSeconds()));
    }
    String type;
    if (e instanceof OpenAiError o) {
      type = o.type;
    } else {
      type = switch (c.status()) {
        case 400, 404, 413, 415 -> "invalid_request_error";
        case 401 -> "authentication_error";
        case 429 -> "rate_limit_error";
        default -> c.status() >= 500 ? "server_error" : "invalid_request_error";
      };
    }
    ObjectNode error = Http.object();
    ObjectNode inner = error.putObject("error");
    inner.put("message", c.message());
    inner.put("type", type);
    if (e instanceof OpenAiError o && o.param != null) {
      inner.put("param", o.param);
    } else {
      inner.putNull("param");
    }
    if (e.code() == null) {
      inner.putNull("code");
    } else {
      inner.put("code", c.code());
    }
    inner.put("requestId", Http.requestId(ctx));
    Http.sendJson(ctx, c.status(), error);
  }
}
