package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.ResponseStream;
import dev.thaw.runtime.function.Tokenizer;
import io.vertx.core.Context;
import io.vertx.core.Vertx;
import io.vertx.ext.web.RoutingContext;
import java.util.List;

/**
 * A streamed request's server-sent events, written on its event loop as the function's parts arrive: first, per
 * choice, a chat's role (or a completion's echoed prompt); then each token's text as a delta once it is safe to send
 * ({@link ChoiceText}: never half a character, never the start of a stop string), with its log-probabilities when
 * asked; a choice's finish when it ends; with {@code include_usage} a last chunk with the usage and no choices; then
 * {@code [DONE]}. Tokens the response holds beyond the parts (a function that does not stream) are sent at its end.
 * When every choice has ended at a stop string the request is cancelled: the function stops generating. A failure
 * after the first event is an {@code error} event, since the status is gone.
 */
final class OpenAiEvents {
  private final RoutingContext ctx;
  private final String id;
  private final long created;
  private final OpenAiRequest ask;
  private final Tokenizer tokenizer;
  private final List<String> promptTexts;
  private final int promptTokens;
  private final ChoiceText[] texts;
  /** Per choice: tokens seen, whether its finish was sent, the length of its text in log-probability offsets. */
  private final int[] seen;
  private final boolean[] ended;
  private final int[] offsets;
  /** The request's stream, cancelled once every choice ended at a stop string. */
  private ResponseStream stream;
  private boolean started;

  OpenAiEvents(RoutingContext ctx, String id, long created, OpenAiRequest ask, Tokenizer tokenizer,
      OpenAiPrompts prompts) {
    this.ctx = ctx;
    this.id = id;
    this.created = created;
    this.ask = ask;
    this.tokenizer = tokenizer;
    this.promptTexts = prompts.texts();
    this.promptTokens = prompts.tokens();
    int choices = prompts.ids().size() * ask.n();
    this.texts = new ChoiceText[choices];
    this.seen = new int[choices];
    this.ended = new boolean[choices];
    this.offsets = new int[choices];
    for (int i = 0; i < choices; i++) {
      texts[i] = tokenizer == null ? null : new ChoiceText(tokenizer, ask.stops());
    }
  }

  /** The stream to hand the function: its parts come to {@link #part} on the calling event loop. */
  ResponseStream stream() {
    Context context = Vertx.currentContext();
    stream = ResponseStream.streamed(part -> context.runOnContext(v -> part(part)));
    return stream;
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
    if (ask.chat()) {
      ArrayNode content = Http.object().arrayNode();
      OpenAiResponses.addChatLogprob(content, tokenizer, tokenId, p);
      return Http.object().set("content", content);
    }
    ObjectNode lp = OpenAiResponses.completionLogprobs(Http.object());
    offsets[i] += OpenAiResponses.addCompletionLogprob(lp, tokenizer, tokenId, p, offsets[i]);
    return lp;
  }

  /** The answer: the tokens no part carried, each unfinished choice's rest and finish, the usage, {@code [DONE]}. */
  void done(Invocation inv, Throwable failure) {
    if (failure != null) {
      fail(failure);
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
      completionTokens += finish(i, response);
    }
    if (ask.includeUsage()) {
      ObjectNode last = chunk(true);
      last.putObject("usage").put("prompt_tokens", promptTokens).put("completion_tokens", completionTokens)
          .put("total_tokens", promptTokens + completionTokens);
      send(last);
    }
    ctx.response().end("data: [DONE]\n\n");
  }

  /** Before the first event OpenAI's error with its status; after it, an {@code error} event and the end. */
  private void fail(Throwable failure) {
    if (!started) {
      OpenAiError.send(ctx, failure);
    } else if (!gone()) {
      send(OpenAiError.event(failure));
      ctx.response().end();
    }
  }

  /** Choice {@code i}'s tokens no part carried, then its rest and finish unless it ended; its completion tokens. */
  private int finish(int i, JsonNode response) {
    JsonNode row = response.path("tokens").path(i);
    for (int k = seen[i]; k < row.size(); k++) {
      token(i, row.get(k).asInt(), response.path("logprobs").path(i).path(k));
    }
    int tokens = texts[i] == null ? seen[i] : texts[i].tokens();
    if (!ended[i]) {
      String rest = texts[i] == null ? "" : texts[i].flush();
      if (!rest.isEmpty()) {
        send(delta(rest, null, i, null));
      }
      ended[i] = true;
      send(delta("", null, i, texts[i] != null && texts[i].stopped() ? "stop"
          : response.path("finish").path(i).asText("length")));
    }
    return tokens;
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
        send(OpenAiResponses.role(chunk(false), i));
      } else if (ask.echo()) {
        send(delta(promptTexts.get(i / ask.n()), null, i, null));
      }
    }
  }

  private ObjectNode chunk(boolean usageChunk) {
    return OpenAiResponses.chunk(id, created, ask, usageChunk);
  }

  private ObjectNode delta(String text, JsonNode logprobs, int index, String finish) {
    return OpenAiResponses.delta(chunk(false), ask, text, logprobs, index, finish);
  }

  private void send(JsonNode chunk) {
    if (!gone()) {
      ctx.response().write("data: " + chunk + "\n\n");
    }
  }
}
