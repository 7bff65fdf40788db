package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionSignature.LanguageModel;
import dev.thaw.runtime.function.Tokenizer;
import dev.thaw.runtime.text.TemplateException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A request's prompts as the model reads them, checked against its context: a chat's messages rendered by the
 * model's chat template, or a completion's texts and token ids. Each prompt keeps its text (a completion's echo).
 *
 * @param ids per prompt, its token ids
 * @param texts per prompt, its text (token ids decoded; empty without a tokenizer)
 * @param maxTokens the tokens each sequence may generate: as asked, or what the longest prompt leaves of the context
 */
record OpenAiPrompts(List<int[]> ids, List<String> texts, int maxTokens) {

  /** In the order OpenAI's reference lists them: the error that names them says them in that order every time. */
  private static final List<String> ROLES = List.of("system", "developer", "user", "assistant", "tool");
  private static final ObjectMapper PLAIN = new ObjectMapper();

  /** The prompts of a request's body, read with the model's tokenizer and chat template. */
  static OpenAiPrompts of(OpenAiRequest ask, JsonNode body, TextModels.Text t) {
    Tokenizer tokenizer = t.tokenizer();
    List<int[]> ids = new ArrayList<>();
    List<String> texts = new ArrayList<>();
    if (ask.chat()) {
      String prompt = chat(ask, t, body.get("messages"));
      ids.add(tokenizer.encode(prompt, false));
      texts.add(prompt);
    } else {
      completion(body.get("prompt"), tokenizer, ask.lm(), ids, texts);
    }
    int maxTokens = maxTokens(ask, ids);
    if (ask.stops().size() > 0 && tokenizer == null) {
      throw OpenAiError.invalid("'stop' needs the model's tokenizer, which it has none of", "stop");
    }
    return new OpenAiPrompts(ids, texts, maxTokens);
  }

  /** The prompts' tokens together (usage's {@code prompt_tokens}). */
  int tokens() {
    return ids.stream().mapToInt(p -> p.length).sum();
  }

  /** Checks the sequences against the model's batch and context; the tokens each may generate. */
  private static int maxTokens(OpenAiRequest ask, List<int[]> prompts) {
    int sequences = prompts.size() * ask.n();
    if (sequences > ask.lm().maxBatch()) {
      throw OpenAiError.invalid(prompts.size() + " prompt(s) × n " + ask.n() + " = " + sequences + " sequences; the "
          + "model '" + ask.model() + "' takes at most " + ask.lm().maxBatch() + " in one request", "n");
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
    return maxTokens;
  }

  // ---- chat ----

  private static String chat(OpenAiRequest ask, TextModels.Text t, JsonNode messages) {
    if (t.tokenizer() == null) {
      throw OpenAiError.invalid("the model '" + ask.model() + "' has no tokenizer: chat needs one", "model");
    }
    if (t.chat() == null) {
      throw OpenAiError.invalid("the model '" + ask.model() + "' has no chat template" + (ask.lm().chat() != null
          ? " this server reads" : "") + ": use /v1/completions", "messages");
    }
    return render(t, ask.lm(), messages);
  }

  private static String render(TextModels.Text t, LanguageModel lm, JsonNode messages) {
    if (messages == null || !messages.isArray() || messages.isEmpty()) {
      throw OpenAiError.invalid("'messages' must be a non-empty list of messages", "messages");
    }
    List<Map<String, Object>> list = new ArrayList<>();
    for (int i = 0; i < messages.size(); i++) {
      list.add(message(messages.get(i), "messages[" + i + "]"));
    }
    try {
      return t.chat().render(list, true, lm.chat().specialTokens(), Map.of());
    } catch (TemplateException e) {
      if (e.raised()) {
        throw OpenAiError.invalid("the model's chat template refused the messages: " + e.getMessage(), "messages");
      }
      throw new OpenAiError(500, "server_error", "chat_template_error", null, "the model's chat template failed: "
          + e.getMessage());
    }
  }

  /** One message as the template reads it: its fields as plain values, its role and its content as text. */
  private static Map<String, Object> message(JsonNode m, String where) {
    if (!m.isObject()) {
      throw OpenAiError.invalid(where + " must be an object with 'role' and 'content'", where);
    }
    String role = m.path("role").asText(null);
    if (role == null || !m.get("role").isTextual() || !ROLES.contains(role)) {
      throw OpenAiError.invalid(where + ".role must be one of " + ROLES, where + ".role");
    }
    Map<String, Object> message = new LinkedHashMap<>();
    m.fields().forEachRemaining(e -> message.put(e.getKey(), PLAIN.convertValue(e.getValue(), Object.class)));
    // Chat templates are written for system, user, assistant and tool; OpenAI's developer role is a system one.
    message.put("role", role.equals("developer") ? "system" : role);
    message.put("content", content(m.get("content"), where, role));
    return message;
  }

  /** A message's content as templates expect it: text (a list of text parts joined by newlines). */
  private static String content(JsonNode c, String where, String role) {
    if (c == null || c.isNull()) {
      if (role.equals("assistant")) {
        return "";
      }
      throw OpenAiError.invalid(where + ".content is required", where + ".content");
    }
    if (c.isTextual()) {
      return c.asText();
    }
    if (c.isArray()) {
      List<String> parts = new ArrayList<>();
      for (JsonNode p : c) {
        if (!p.path("type").asText().equals("text") || !p.path("text").isTextual()) {
          throw OpenAiError.invalid(where + ".content: only text parts ({\"type\": \"text\", \"text\": ...}) are "
              + "supported", where + ".content");
        }
        parts.add(p.get("text").asText());
      }
      return String.join("\n", parts);
    }
    throw OpenAiError.invalid(where + ".content must be a string or a list of text parts", where + ".content");
  }

  // ---- completions ----

  private static void completion(JsonNode prompt, Tokenizer tokenizer, LanguageModel lm, List<int[]> out,
      List<String> texts) {
    if (prompt == null || prompt.isNull()) {
      throw OpenAiError.invalid("'prompt' is required: text, a list of texts, token ids or a list of token id lists",
          "prompt");
    }
    if (prompt.isTextual()) {
      addText(prompt.asText(), tokenizer, out, texts);
    } else if (prompt.isArray() && !prompt.isEmpty() && prompt.get(0).isIntegralNumber()) {
      addIds(prompt, tokenizer, lm, out, texts);
    } else if (prompt.isArray() && !prompt.isEmpty()) {
      for (JsonNode p : prompt) {
        if (p.isTextual()) {
          addText(p.asText(), tokenizer, out, texts);
        } else if (p.isArray() && !p.isEmpty()) {
          addIds(p, tokenizer, lm, out, texts);
        } else {
          throw OpenAiError.invalid("'prompt' holds texts or non-empty lists of token ids, not " + p, "prompt");
        }
      }
    } else {
      throw OpenAiError.invalid("'prompt' is text, a list of texts, token ids or a list of token id lists", "prompt");
    }
    for (int[] p : out) {
      if (p.length == 0) {
        throw OpenAiError.invalid("a prompt is empty", "prompt");
      }
    }
  }

  private static void addText(String text, Tokenizer tokenizer, List<int[]> out, List<String> texts) {
    if (tokenizer == null) {
      throw OpenAiError.invalid("this model has no tokenizer: send the prompt as token ids", "prompt");
    }
    out.add(tokenizer.encode(text, true));
    texts.add(text);
  }

  private static void addIds(JsonNode array, Tokenizer tokenizer, LanguageModel lm, List<int[]> out,
      List<String> texts) {
    int[] ids = new int[array.size()];
    for (int i = 0; i < ids.length; i++) {
      JsonNode t = array.get(i);
      if (!t.isIntegralNumber() || t.longValue() < 0 || t.longValue() >= lm.vocabSize()) {
        throw OpenAiError.invalid("token " + t + " is not an id below the vocabulary size " + lm.vocabSize(),
            "prompt");
      }
      ids[i] = t.intValue();
    }
    out.add(ids);
    texts.add(tokenizer == null ? "" : tokenizer.decode(ids, false));
  }
}
