package dev.thaw.examples.llama;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.text.ChatTemplate;
import dev.thaw.runtime.text.TemplateException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Thaw's side of the text checks against transformers and tokenizers ({@code scripts/gpu/text-run.sh}): renders chat
 * cases with {@link ChatTemplate}, and encodes and decodes texts with {@link ByteLevelBpe}, writing what it got for
 * the Python side to compare.
 *
 * <pre>
 *   TextCheck chat TEMPLATE_DIR CASES.json OUT.json      (cases as scripts/llm/chat_cases.py writes them)
 *   TextCheck tokens TOKENIZER.json TEXTS.json OUT.json  (TEXTS: a JSON list of strings)
 * </pre>
 */
public final class TextCheck {

  private static final ObjectMapper JSON = new ObjectMapper();

  private TextCheck() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 4 || !List.of("chat", "tokens").contains(args[0])) {
      System.err.println("usage: TextCheck chat TEMPLATE_DIR CASES.json OUT.json | tokens TOKENIZER.json TEXTS.json "
          + "OUT.json");
      System.exit(2);
    }
    ArrayNode out = JSON.createArrayNode();
    if (args[0].equals("chat")) {
      for (JsonNode c : JSON.readTree(Path.of(args[2]).toFile())) {
        ObjectNode r = out.addObject().put("template", c.get("template").asText()).put("name", c.get("name").asText());
        try {
          ChatTemplate t = ChatTemplate.compile(Files.readString(Path.of(args[1], c.get("template").asText())));
          List<Map<String, Object>> messages = JSON.convertValue(c.get("messages"), new TypeReference<>() {});
          Map<String, String> special = JSON.convertValue(c.get("special"), new TypeReference<>() {});
          Map<String, Object> extra = c.has("extra") ? JSON.convertValue(c.get("extra"), new TypeReference<>() {})
              : Map.of();
          r.put("got", t.render(messages, c.get("add_generation_prompt").asBoolean(), special, extra));
        } catch (TemplateException e) {
          r.put("error", e.getMessage()).put("raised", e.raised());
        }
      }
    } else {
      ByteLevelBpe bpe = ByteLevelBpe.load(Path.of(args[1]));
      for (JsonNode text : JSON.readTree(Path.of(args[2]).toFile())) {
        ObjectNode r = out.addObject().put("text", text.asText());
        int[] ids = bpe.encode(text.asText(), true);
        ArrayNode a = r.putArray("ids");
        for (int id : ids) {
          a.add(id);
        }
        ArrayNode plain = r.putArray("idsNoSpecial");
        for (int id : bpe.encode(text.asText(), false)) {
          plain.add(id);
        }
        r.put("decoded", bpe.decode(ids, true));
        r.put("decodedWithSpecial", bpe.decode(ids, false));
      }
    }
    JSON.writerWithDefaultPrettyPrinter().writeValue(Path.of(args[3]).toFile(), out);
    System.out.println("wrote " + out.size() + " results to " + args[3]);
  }
}
