package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.Tokenizer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The shapes of OpenAI's answers: a whole completion or chat completion with its choices and usage, and a stream's
 * chunks and deltas. A choice's text is its tokens' text up to the first stop string ({@link ChoiceText}); its
 * log-probabilities are the function's, in OpenAI's form for completions (four parallel lists) or chat
 * ({@code content}: one entry per token with its bytes and top alternatives).
 */
final class OpenAiResponses {

  private OpenAiResponses() {}

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

  /** The answer to a request that does not stream, from the function's response. */
  static ObjectNode completion(String id, long created, OpenAiRequest ask, OpenAiPrompts prompts, JsonNode response,
      Tokenizer tokenizer) {
    List<Choice> choices = choices(response, tokenizer, ask, prompts.texts());
    int promptTokens = prompts.tokens();
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
    return out;
  }

  private static List<Choice> choices(JsonNode response, Tokenizer tokenizer, OpenAiRequest ask,
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

  private static ObjectNode completionChoice(Choice c, Tokenizer tokenizer, OpenAiRequest ask) {
    ObjectNode o = Http.object();
    o.put("text", ask.echo() ? c.prompt + c.text : c.text).put("index", c.index);
    if (ask.logprobs() >= 0 && tokenizer != null) {
      ObjectNode lp = o.putObject("logprobs");
      completionLogprobs(lp);
      int offset = 0;
      for (int k = 0; k < c.ids.length; k++) {
        offset += addCompletionLogprob(lp, tokenizer, c.ids[k], c.logprobs.path(k), offset);
      }
    } else {
      o.putNull("logprobs");
    }
    o.put("finish_reason", c.finish);
    return o;
  }

  private static ObjectNode chatChoice(Choice c, Tokenizer tokenizer, OpenAiRequest ask) {
    ObjectNode o = Http.object().put("index", c.index);
    o.putObject("message").put("role", "assistant").put("content", c.text);
    if (ask.logprobs() >= 0) {
      ArrayNode content = o.putObject("logprobs").putArray("content");
      for (int k = 0; k < c.ids.length; k++) {
        addChatLogprob(content, tokenizer, c.ids[k], c.logprobs.path(k));
      }
    } else {
      o.putNull("logprobs");
    }
    o.put("finish_reason", c.finish);
    return o;
  }

  // ---- log-probabilities ----

  /** Completions' log-probabilities: OpenAI's four parallel lists, put into {@code lp} empty. */
  static ObjectNode completionLogprobs(ObjectNode lp) {
    lp.putArray("tokens");
    lp.putArray("token_logprobs");
    lp.putArray("top_logprobs");
    lp.putArray("text_offset");
    return lp;
  }

  /**
   * Adds one token ({@code p}: the function's {@code logprob} and {@code top} pairs) to completions' lists at the
   * text offset {@code offset}; the length of its text, by which the next token's offset moves.
   */
  static int addCompletionLogprob(ObjectNode lp, Tokenizer tokenizer, int id, JsonNode p, int offset) {
    String s = ChoiceText.tokenString(tokenizer, id);
    ((ArrayNode) lp.get("tokens")).add(s);
    ((ArrayNode) lp.get("token_logprobs")).add(p.path("logprob").asDouble());
    ObjectNode alternatives = ((ArrayNode) lp.get("top_logprobs")).addObject();
    for (JsonNode a : p.path("top")) {
      alternatives.put(ChoiceText.tokenString(tokenizer, a.get(0).asInt()), a.get(1).asDouble());
    }
    ((ArrayNode) lp.get("text_offset")).add(offset);
    return s.length();
  }

  /** Adds one token to chat's {@code content}: the token, its log-probability and bytes, and its alternatives. */
  static void addChatLogprob(ArrayNode content, Tokenizer tokenizer, int id, JsonNode p) {
    ObjectNode t = content.addObject();
    token(t, tokenizer, id, p.path("logprob").asDouble());
    ArrayNode top = t.putArray("top_logprobs");
    for (JsonNode a : p.path("top")) {
      token(top.addObject(), tokenizer, a.get(0).asInt(), a.get(1).asDouble());
    }
  }

  private static void token(ObjectNode into, Tokenizer tokenizer, int id, double logprob) {
    into.put("token", ChoiceText.tokenString(tokenizer, id)).put("logprob", logprob);
    ArrayNode bytes = into.putArray("bytes");
    for (byte b : tokenizer.bytes(id)) {
      bytes.add(b & 0xff);
    }
  }

  // ---- stream chunks ----

  /** A chunk of a stream, its choices empty; with {@code include_usage} every chunk but the usage's has a null one. */
  static ObjectNode chunk(String id, long created, OpenAiRequest ask, boolean usageChunk) {
    ObjectNode chunk = Http.object();
    chunk.put("id", id).put("object", ask.chat() ? "chat.completion.chunk" : "text_completion")
        .put("created", created).put("model", ask.model());
    chunk.putArray("choices");
    if (ask.includeUsage() && !usageChunk) {
      chunk.putNull("usage");
    }
    return chunk;
  }

  /** Chat's first chunk of a choice: the assistant's role and empty content. */
  static ObjectNode role(ObjectNode chunk, int index) {
    ObjectNode choice = ((ArrayNode) chunk.get("choices")).addObject().put("index", index);
    choice.putObject("delta").put("role", "assistant").put("content", "");
    choice.putNull("logprobs").putNull("finish_reason");
    return chunk;
  }

  /** A chunk of one choice: its next text (chat: as {@code delta.content}), log-probabilities and finish. */
  static ObjectNode delta(ObjectNode chunk, OpenAiRequest ask, String text, JsonNode logprobs, int index,
      String finish) {
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
}
