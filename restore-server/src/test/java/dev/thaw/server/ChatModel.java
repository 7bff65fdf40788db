package dev.thaw.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.LlamaCheckpoint;
import dev.thaw.examples.llama.LlamaConfig;
import dev.thaw.examples.llama.SeededLlamaWeights;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * A tiny Llama checkpoint as transformers lays one out, with everything text needs: random weights over a 320-token
 * vocabulary, a byte-level {@code tokenizer.json} (the 256 bytes in GPT-2's alphabet, Llama 3's split regex, its
 * special tokens, a begin-of-text added to every text), a {@code tokenizer_config.json} with a chat template in Llama
 * 3's layout, and a {@code generation_config.json} that ends generation at {@code <|eot_id|>}.
 */
public final class ChatModel {

  public static final int BOS = 300;
  public static final int EOT = 301;
  public static final String TEMPLATE = "{{- bos_token }}{%- for m in messages %}"
      + "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
      + "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
      + "{%- endif %}";
  static final String LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
      + "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  private static final ObjectMapper JSON = new ObjectMapper();

  private ChatModel() {}

  /** Writes the checkpoint into {@code dir}; {@code withTemplate} false leaves the chat template out. */
  public static Path write(Path dir, boolean withTemplate) throws Exception {
    Files.createDirectories(dir);
    LlamaConfig t = LlamaConfig.named("tiny");
    LlamaConfig c = new LlamaConfig("tiny-chat", t.architecture(), t.hiddenSize(), t.layers(), t.heads(),
        t.kvHeads(), t.headDim(), t.intermediateSize(), 320, 128, t.rmsNormEps(), t.ropeTheta(), t.ropeScaling(),
        t.tieEmbeddings(), t.qkvBias(), t.slidingWindow(), t.type()).validate();
    LlamaCheckpoint.save(new SeededLlamaWeights(c, 11), dir, 1);
    JSON.writeValue(dir.resolve("tokenizer.json").toFile(), tokenizer());
    ObjectNode config = JSON.createObjectNode().put("bos_token", "<|begin_of_text|>").put("eos_token", "<|eot_id|>");
    if (withTemplate) {
      config.put("chat_template", TEMPLATE);
    }
    JSON.writeValue(dir.resolve("tokenizer_config.json").toFile(), config);
    ObjectNode generation = JSON.createObjectNode().put("bos_token_id", BOS);
    generation.putArray("eos_token_id").add(EOT);
    JSON.writeValue(dir.resolve("generation_config.json").toFile(), generation);
    return dir;
  }

  static String sym(int b) {
    int n = 0;
    for (int i = 0; i < 256; i++) {
      boolean printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
      if (i == b) {
        return String.valueOf((char) (printable ? i : 256 + n));
      }
      if (!printable) {
        n++;
      }
    }
    throw new IllegalArgumentException();
  }

  private static ObjectNode tokenizer() {
    ObjectNode root = JSON.createObjectNode();
    ObjectNode model = root.putObject("model").put("type", "BPE").put("ignore_merges", true);
    ObjectNode vocab = model.putObject("vocab");
    for (int b = 0; b < 256; b++) {
      vocab.put(sym(b), b);
    }
    String g = sym(' ');
    String[][] merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {g, "w"}, {"o", "r"}, {g + "w", "or"}};
    ArrayNode m = model.putArray("merges");
    int id = 256;
    for (String[] pair : merges) {
      m.addArray().add(pair[0]).add(pair[1]);
      vocab.put(pair[0] + pair[1], id++);
    }
    ObjectNode pre = root.putObject("pre_tokenizer").put("type", "Sequence");
    ArrayNode steps = pre.putArray("pretokenizers");
    steps.addObject().put("type", "Split").put("behavior", "Isolated").put("invert", false)
        .putObject("pattern").put("Regex", LLAMA3_REGEX);
    steps.addObject().put("type", "ByteLevel").put("add_prefix_space", false).put("use_regex", false);
    ArrayNode added = root.putArray("added_tokens");
    String[] specials = {"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"};
    for (int i = 0; i < specials.length; i++) {
      added.addObject().put("id", BOS + i).put("content", specials[i]).put("special", true);
    }
    ObjectNode post = root.putObject("post_processor").put("type", "TemplateProcessing");
    post.putArray("single").addObject().putObject("SpecialToken").put("id", "<|begin_of_text|>");
    ((ArrayNode) post.get("single")).addObject().putObject("Sequence").put("id", "A");
    post.putObject("special_tokens").putObject("<|begin_of_text|>").putArray("ids").add(BOS);
    root.putObject("decoder").put("type", "ByteLevel");
    return root;
  }
}
