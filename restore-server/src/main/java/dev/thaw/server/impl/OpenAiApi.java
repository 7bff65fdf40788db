package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.function.FunctionSignature.LanguageModel;
import dev.thaw.runtime.function.Tokenizer;
import io.vertx.ext.web.Router;
import io.vertx.ext.web.RoutingContext;
import java.time.Instant;
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
 *
 * <p>This class keeps the routes and a request's run; its parts, each referring only to those below it:
 * <pre>
 * OpenAiApi        routes, models, a request's run: parse, load the text model, read the prompts, submit, answer
 *   → OpenAiEvents     a streamed answer's server-sent events
 *   → OpenAiResponses  the answer's shapes: choices, usage, log-probabilities, stream chunks
 *   → OpenAiPrompts    the prompts: chat messages through the template, completion texts and ids; context checks
 *   → OpenAiRequest    the body's fields, read and checked; the function's request
 *   → OpenAiError      OpenAI's error object: its type, its refusals, sending it
 * </pre>
 */
final class OpenAiApi {

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
    OpenAiError.send(ctx, new OpenAiError(404, "invalid_request_error", "unknown_url", null, "Invalid URL ("
        + ctx.request().method() + " " + ctx.request().path() + ")"));
  }

  private static void guard(RoutingContext ctx, Runnable body) {
    try {
      body.run();
    } catch (RuntimeException e) {
      OpenAiError.send(ctx, e);
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
        .orElseThrow(() -> OpenAiError.modelNotFound(id));
    Http.sendJson(ctx, 200, model(id, image));
  }

  private static ObjectNode model(String name, ImageInfo image) {
    LanguageModel lm = image.signature().languageModel().orElseThrow();
    ObjectNode m = Http.object().put("id", name).put("object", "model")
        .put("created", Instant.parse(image.manifest().build().created()).getEpochSecond()).put("owned_by", "thaw");
    m.put("root", image.tag()).put("max_model_len", lm.contextLength());
    return m;
  }

  // ---- completions and chat ----

  private void generate(RoutingContext ctx, boolean chat) {
    JsonNode body = http.json(ctx);
    OpenAiRequest ask = OpenAiRequest.of(body, chat, scheduler);
    text.of(ask.image(), ask.lm()).whenComplete((t, e) -> ctx.vertx().runOnContext(v -> guard(ctx, () -> {
      if (e != null) {
        throw e instanceof RuntimeException r ? r : new RuntimeException(e);
      }
      run(ctx, body, ask, t);
    })));
  }

  /** Reads the prompts with the model's text, then submits the function's request and answers, streamed or whole. */
  private void run(RoutingContext ctx, JsonNode body, OpenAiRequest ask, TextModels.Text t) {
    OpenAiPrompts prompts = OpenAiPrompts.of(ask, body, t);
    FunctionRequest request = FunctionRequest.of(ask.function(prompts.ids(), prompts.maxTokens()));
    String id = (ask.chat() ? "chatcmpl-" : "cmpl-") + Long.toHexString(ids.incrementAndGet());
    long created = System.currentTimeMillis() / 1000;
    if (ask.stream()) {
      OpenAiEvents events = new OpenAiEvents(ctx, id, created, ask, t.tokenizer(), prompts);
      Http.onInvocation(ctx, scheduler.submit(ask.model(), request, events.stream()), events::done);
    } else {
      answer(ctx, scheduler.submit(ask.model(), request), id, created, ask, prompts, t.tokenizer());
    }
  }

  /** The whole answer once the function's response is in, with its timing headers. */
  private static void answer(RoutingContext ctx, Scheduler.Pending pending, String id, long created,
      OpenAiRequest ask, OpenAiPrompts prompts, Tokenizer tokenizer) {
    Http.onInvocation(ctx, pending, (inv, e) -> {
      if (e != null) {
        OpenAiError.send(ctx, e);
        return;
      }
      ctx.put(Http.INVOCATION, inv);
      NativeApi.timingHeaders(ctx, inv);
      Http.sendJson(ctx, 200, OpenAiResponses.completion(id, created, ask, prompts, inv.response().json(),
          tokenizer));
    });
  }
}
