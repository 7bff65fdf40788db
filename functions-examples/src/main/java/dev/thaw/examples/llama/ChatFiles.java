package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.FunctionSignature.ChatFormat;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.ToIntFunction;

/**
 * What a Hugging Face checkpoint says about chats and their end: the chat template ({@code chat_template.jinja}, as
 * transformers 5 saves it, else {@code tokenizer_config.json}'s {@code chat_template}: a string, or a list of named
 * templates of which {@code default} is taken), the special tokens a template reads ({@code bos_token},
 * {@code eos_token}, ...), and the ids generation stops at ({@code generation_config.json}'s {@code eos_token_id},
 * else the id of {@code tokenizer_config.json}'s {@code eos_token}).
 */
final class ChatFiles {

  private static final ObjectMapper JSON = new ObjectMapper();
  private static final List<String> SPECIAL = List.of("bos_token", "eos_token", "unk_token", "pad_token");

  private ChatFiles() {}

  /** The chat format of the checkpoint in {@code dir}, or null when it has no template. */
  static ChatFormat chat(Path dir) throws IOException {
    JsonNode config = read(dir.resolve("tokenizer_config.json"));
    String template = null;
    Path jinja = dir.resolve("chat_template.jinja");
    if (Files.isRegularFile(jinja)) {
      template = Files.readString(jinja);
    } else if (config != null) {
      JsonNode t = config.get("chat_template");
      if (t != null && t.isTextual()) {
        template = t.asText();
      } else if (t != null && t.isArray()) {
        for (JsonNode named : t) {
          if (named.path("name").asText().equals("default")) {
            template = named.path("template").asText(null);
          }
        }
      }
    }
    if (template == null || template.isEmpty()) {
      return null;
    }
    Map<String, String> special = new LinkedHashMap<>();
    for (String name : SPECIAL) {
      String token = tokenText(config == null ? null : config.get(name));
      if (token != null) {
        special.put(name, token);
      }
    }
    return new ChatFormat(template, special);
  }

  /** The ids that end a sequence; {@code idOf} finds a special token's id by its text (-1 when unknown). */
  static List<Integer> stopTokens(Path dir, ToIntFunction<String> idOf) throws IOException {
    List<Integer> ids = new ArrayList<>();
    JsonNode generation = read(dir.resolve("generation_config.json"));
    JsonNode eos = generation == null ? null : generation.get("eos_token_id");
    if (eos != null && eos.isIntegralNumber()) {
      ids.add(eos.asInt());
    } else if (eos != null && eos.isArray()) {
      eos.forEach(e -> ids.add(e.asInt()));
    }
    if (ids.isEmpty()) {
      JsonNode config = read(dir.resolve("tokenizer_config.json"));
      String text = tokenText(config == null ? null : config.get("eos_token"));
      int id = text == null ? -1 : idOf.applyAsInt(text);
      if (id >= 0) {
        ids.add(id);
      }
    }
    return ids;
  }

  /** A special token as tokenizer_config writes it: its text, or an AddedToken object with {@code content}. */
  private static String tokenText(JsonNode n) {
    if (n == null || n.isNull()) {
      return null;
    }
    return n.isTextual() ? n.asText() : n.path("content").asText(null);
  }

  private static JsonNode read(Path file) throws IOException {
    if (!Files.isRegularFile(file)) {
      return null;
    }
    try {
      return JSON.readTree(file.toFile());
    } catch (IOException e) {
      throw new InvalidConfigException(file + " is not JSON: " + e.getMessage(), e);
    }
  }
}
