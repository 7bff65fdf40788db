package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.runtime.function.InvalidConfigException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The byte-level BPE reader on a small {@code tokenizer.json} made here in Llama 3's layout: the 256 byte symbols
 * (GPT-2's alphabet), a few merges, Llama 3's split regex, a begin-of-text token added by the template.
 */
class ByteLevelBpeTest {

  private static final ObjectMapper JSON = new ObjectMapper();
  /** Llama 3's pre-tokenizer regex, as its tokenizer.json has it. */
  static final String LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?"
      + "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static final int BOS = 300;
  static final int EOT = 301;

  /** Byte b's symbol in GPT-2's alphabet. */
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

  /**
   * Ids 0..255 are the bytes (in byte order); 256.. the merges: "h e" -> he (256), "l l" -> ll (257),
   * "he ll" -> hell (258), "hell o" -> hello (259), "Ġ w" -> Ġw (260), "o r" -> or (261), "Ġw or" -> Ġwor (262).
   */
  static ObjectNode tokenizerJson() {
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
    added.addObject().put("id", BOS).put("content", "<|begin_of_text|>").put("special", true);
    added.addObject().put("id", EOT).put("content", "<|eot_id|>").put("special", true);
    ObjectNode post = root.putObject("post_processor").put("type", "TemplateProcessing");
    post.putArray("single").addObject().putObject("SpecialToken").put("id", "<|begin_of_text|>");
    ((ArrayNode) post.get("single")).addObject().putObject("Sequence").put("id", "A");
    post.putObject("special_tokens").putObject("<|begin_of_text|>").putArray("ids").add(BOS);
    root.putObject("decoder").put("type", "ByteLevel");
    return root;
  }

  static Path write(Path dir) throws Exception {
    Path f = dir.resolve("tokenizer.json");
    JSON.writeValue(f.toFile(), tokenizerJson());
    return f;
  }

  @Test
  void encodesByRankAndDecodesBack(@TempDir Path dir) throws Exception {
    ByteLevelBpe bpe = ByteLevelBpe.load(write(dir));
    // "hello" -> hello; " world" -> Ġwor + l + d; "!" -> byte.
    assertArrayEquals(new int[] {BOS, 259, 262, 'l', 'd', '!'}, bpe.encode("hello world!"));
    assertEquals("hello world!", bpe.decode(bpe.encode("hello world!"), true));
    assertEquals("<|begin_of_text|>hello", bpe.decode(bpe.encode("hello"), false));
    // An added token inside the text is one id; the pieces around it are encoded as text.
    assertArrayEquals(new int[] {BOS, 259, EOT, 262}, bpe.encode("hello<|eot_id|> wor"));
    // Bytes of non-ASCII text: é is C3 A9, each a byte symbol; numbers split in threes.
    assertArrayEquals(new int[] {BOS, 0xC3, 0xA9, '1', '2', '3', '4'}, bpe.encode("é1234"));
    assertEquals("é1234\n", bpe.decode(bpe.encode("é1234\n"), true));
    String mixed = "Qu'il fasse beau, 42 fois!\n\n  Ça va?";
    assertEquals(mixed, bpe.decode(bpe.encode(mixed), true));
  }

  @Test
  void refusesTokenizersItDoesNotRead(@TempDir Path dir) throws Exception {
    String[][] bad = {
        {"/model/byte_fallback", "true", "byte_fallback"},
        {"/model/type", "\"WordPiece\"", "model.type is 'WordPiece'"},
        {"/normalizer", "{\"type\": \"Lowercase\"}", "normalizer.type is 'Lowercase'"},
        {"/decoder", "{\"type\": \"Metaspace\"}", "decoder.type is 'Metaspace'"},
    };
    for (String[] b : bad) {
      ObjectNode json = tokenizerJson();
      String parent = b[0].substring(0, b[0].lastIndexOf('/'));
      String field = b[0].substring(b[0].lastIndexOf('/') + 1);
      ObjectNode at = parent.isEmpty() ? json : (ObjectNode) json.at(parent);
      at.set(field, JSON.readTree(b[1]));
      Path f = dir.resolve("t.json");
      JSON.writeValue(f.toFile(), json);
      InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> ByteLevelBpe.load(f));
      assertTrue(e.getMessage().contains(b[2]), e.getMessage());
    }
    Path junk = dir.resolve("junk.json");
    Files.write(junk, "{".getBytes(StandardCharsets.UTF_8));
    assertThrows(InvalidConfigException.class, () -> ByteLevelBpe.load(junk));
  }
}
