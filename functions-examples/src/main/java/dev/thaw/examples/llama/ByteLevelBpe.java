package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.runtime.function.InvalidConfigException;
import dev.thaw.runtime.function.Tokenizer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.text.Normalizer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A byte-level BPE tokenizer read from a Hugging Face {@code tokenizer.json}: the kind Llama 3 and Qwen2 ship
 * (GPT-2's too). Encoding: added tokens are cut out first, the rest is normalised (none or NFC), split by the
 * pre-tokenizer's regex ({@code Split} with {@code Isolated} behaviour and/or {@code ByteLevel} with its GPT-2
 * regex), each piece mapped byte by byte to GPT-2's printable alphabet and merged by rank (a piece that is
 * already a vocabulary entry is taken whole when {@code ignore_merges}); the post-processor's template adds its
 * special tokens (Llama 3's {@code <|begin_of_text|>}). Decoding maps the alphabet back to bytes and reads UTF-8.
 *
 * <p>Anything else (SentencePiece-style BPE with byte fallback, WordPiece, other normalisers or pre-tokenizers)
 * is refused by {@link #load} naming the field. Thread-safe once loaded.
 */
public final class ByteLevelBpe implements Tokenizer {

  private static final ObjectMapper JSON = new ObjectMapper();
  /** GPT-2's pre-tokenizer regex: what {@code ByteLevel} with {@code use_regex: true} splits by. */
  static final String GPT2_PATTERN =
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
  private static final char[] BYTE_TO_CHAR = new char[256];
  private static final Map<Character, Integer> CHAR_TO_BYTE = new HashMap<>();

  static {
    // GPT-2's bytes_to_unicode: printable bytes stand for themselves, the rest for 256, 257, ...
    int n = 0;
    for (int b = 0; b < 256; b++) {
      boolean printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      BYTE_TO_CHAR[b] = (char) (printable ? b : 256 + n++);
      CHAR_TO_BYTE.put(BYTE_TO_CHAR[b], b);
    }
  }

  private final Map<String, Integer> vocab;
  private final String[] tokens;
  private final Map<String, Integer> ranks;
  private final boolean ignoreMerges;
  private final boolean nfc;
  private final List<Pattern> splits;
  private final boolean addPrefixSpace;
  private final Map<String, Integer> added;
  private final boolean[] special;
  private final int[] prefix;
  private final int[] suffix;
  private final Pattern addedPattern;
  private final Map<String, int[]> cache = new ConcurrentHashMap<>();

  private ByteLevelBpe(Map<String, Integer> vocab, Map<String, Integer> ranks, boolean ignoreMerges, boolean nfc,
      List<Pattern> splits, boolean addPrefixSpace, Map<String, Integer> added, List<Integer> specialIds,
      int[] prefix, int[] suffix) {
    this.vocab = vocab;
    this.ranks = ranks;
    this.ignoreMerges = ignoreMerges;
    this.nfc = nfc;
    this.splits = splits;
    this.addPrefixSpace = addPrefixSpace;
    this.added = added;
    this.prefix = prefix;
    this.suffix = suffix;
    int size = 0;
    for (int id : vocab.values()) {
      size = Math.max(size, id + 1);
    }
    for (int id : added.values()) {
      size = Math.max(size, id + 1);
    }
    this.tokens = new String[size];
    this.special = new boolean[size];
    vocab.forEach((t, id) -> tokens[id] = t);
    added.forEach((t, id) -> tokens[id] = t);
    for (int id : specialIds) {
      special[id] = true;
    }
    List<String> byLength = new ArrayList<>(added.keySet());
    byLength.sort(Comparator.comparingInt(String::length).reversed());
    this.addedPattern = byLength.isEmpty() ? null
        : Pattern.compile(String.join("|", byLength.stream().map(Pattern::quote).toList()));
  }

  /**
   * Reads {@code tokenizer.json}.
   *
   * @throws InvalidConfigException if it is not JSON or not a byte-level BPE tokenizer this class reads
   */
  public static ByteLevelBpe load(Path file) throws IOException {
    JsonNode json;
    try {
      json = JSON.readTree(file.toFile());
    } catch (IOException e) {
      throw new InvalidConfigException(file + " is not JSON: " + e.getMessage(), e);
    }
    try {
      return of(json);
    } catch (InvalidConfigException e) {
      throw new InvalidConfigException(file + ": " + e.getMessage(), e);
    }
  }

  static ByteLevelBpe of(JsonNode json) {
    JsonNode model = json.path("model");
    if (!model.path("type").asText("BPE").equals("BPE") || !model.has("vocab")) {
      throw new InvalidConfigException("model.type is '" + model.path("type").asText() + "'; only byte-level BPE "
          + "is supported");
    }
    if (model.path("byte_fallback").asBoolean(false)) {
      throw new InvalidConfigException("model.byte_fallback = true (SentencePiece-style BPE) is not supported");
    }
    Map<String, Integer> vocab = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = model.get("vocab").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      vocab.put(e.getKey(), e.getValue().asInt());
    }
    Map<String, Integer> ranks = new HashMap<>();
    int rank = 0;
    for (JsonNode m : model.path("merges")) {
      String pair = m.isArray() ? m.get(0).asText() + " " + m.get(1).asText() : m.asText();
      ranks.putIfAbsent(pair, rank++);
    }

    JsonNode norm = json.path("normalizer");
    boolean nfc = false;
    if (!norm.isMissingNode() && !norm.isNull()) {
      if (!norm.path("type").asText().equals("NFC")) {
        throw new InvalidConfigException("normalizer.type is '" + norm.path("type").asText()
            + "'; supported: none, NFC");
      }
      nfc = true;
    }

    List<Pattern> splits = new ArrayList<>();
    boolean[] prefixSpace = {false};
    JsonNode pre = json.path("pre_tokenizer");
    List<JsonNode> steps = new ArrayList<>();
    if (pre.path("type").asText().equals("Sequence")) {
      pre.path("pretokenizers").forEach(steps::add);
    } else if (!pre.isMissingNode() && !pre.isNull()) {
      steps.add(pre);
    }
    boolean byteLevel = false;
    for (JsonNode step : steps) {
      switch (step.path("type").asText()) {
        case "Split" -> {
          String regex = step.path("pattern").path("Regex").asText(null);
          if (regex == null || !step.path("behavior").asText().equals("Isolated")
              || step.path("invert").asBoolean(false)) {
            throw new InvalidConfigException("pre_tokenizer Split needs a Regex pattern with behavior Isolated, not "
                + step);
          }
          splits.add(Pattern.compile(regex, Pattern.UNICODE_CHARACTER_CLASS));
        }
        case "ByteLevel" -> {
          byteLevel = true;
          prefixSpace[0] = step.path("add_prefix_space").asBoolean(false);
          if (step.path("use_regex").asBoolean(true)) {
            splits.add(Pattern.compile(GPT2_PATTERN, Pattern.UNICODE_CHARACTER_CLASS));
          }
        }
        default -> throw new InvalidConfigException("pre_tokenizer type '" + step.path("type").asText()
            + "' is not supported; supported: Split (Isolated), ByteLevel");
      }
    }
    if (!byteLevel) {
      throw new InvalidConfigException("pre_tokenizer has no ByteLevel step: not a byte-level BPE tokenizer");
    }

    Map<String, Integer> added = new LinkedHashMap<>();
    List<Integer> specialIds = new ArrayList<>();
    for (JsonNode t : json.path("added_tokens")) {
      added.put(t.path("content").asText(), t.path("id").asInt());
      if (t.path("special").asBoolean(false)) {
        specialIds.add(t.path("id").asInt());
      }
    }

    List<Integer> before = new ArrayList<>();
    List<Integer> after = new ArrayList<>();
    JsonNode post = json.path("post_processor");
    List<JsonNode> posts = new ArrayList<>();
    if (post.path("type").asText().equals("Sequence")) {
      post.path("processors").forEach(posts::add);
    } else if (!post.isMissingNode() && !post.isNull()) {
      posts.add(post);
    }
    for (JsonNode p : posts) {
      switch (p.path("type").asText()) {
        case "ByteLevel" -> { }
        case "TemplateProcessing" -> {
          boolean seenSequence = false;
          for (JsonNode item : p.path("single")) {
            if (item.has("Sequence")) {
              seenSequence = true;
            } else if (item.has("SpecialToken")) {
              String id = item.get("SpecialToken").path("id").asText();
              JsonNode ids = p.path("special_tokens").path(id).path("ids");
              if (!ids.isArray()) {
                throw new InvalidConfigException("post_processor names special token '" + id + "' without ids");
              }
              for (JsonNode i : ids) {
                (seenSequence ? after : before).add(i.asInt());
              }
            }
          }
        }
        default -> throw new InvalidConfigException("post_processor type '" + p.path("type").asText()
            + "' is not supported; supported: ByteLevel, TemplateProcessing");
      }
    }
    String decoder = json.path("decoder").path("type").asText("ByteLevel");
    if (!decoder.equals("ByteLevel")) {
      throw new InvalidConfigException("decoder.type is '" + decoder + "'; supported: ByteLevel");
    }
    return new ByteLevelBpe(vocab, ranks, model.path("ignore_merges").asBoolean(false), nfc, splits,
        prefixSpace[0], added, specialIds, before.stream().mapToInt(Integer::intValue).toArray(),
        after.stream().mapToInt(Integer::intValue).toArray());
  }

  /** The largest id plus one. */
  public int size() {
    return tokens.length;
  }

  /** Ids of {@code text}, with the post-processor's special tokens around them. */
  public int[] encode(String text) {
    return encode(text, true);
  }

  /** The id of an added or vocabulary token given by its text, or -1. */
  public int id(String token) {
    Integer id = added.get(token);
    if (id == null) {
      id = vocab.get(token);
    }
    return id == null ? -1 : id;
  }

  @Override
  public boolean special(int id) {
    return id >= 0 && id < special.length && special[id];
  }

  @Override
  public byte[] bytes(int id) {
    if (id < 0 || id >= tokens.length || tokens[id] == null) {
      return new byte[0];
    }
    String t = tokens[id];
    if (added.containsKey(t) && !vocab.containsKey(t)) {
      return t.getBytes(StandardCharsets.UTF_8);
    }
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    for (int i = 0; i < t.length(); i++) {
      Integer x = CHAR_TO_BYTE.get(t.charAt(i));
      if (x != null) {
        b.write(x);
      } else {
        b.writeBytes(String.valueOf(t.charAt(i)).getBytes(StandardCharsets.UTF_8));
      }
    }
    return b.toByteArray();
  }

  /** Ids of {@code text}; with {@code addSpecial}, the post-processor's special tokens around them. */
  @Override
  public int[] encode(String text, boolean addSpecial) {
    List<Integer> out = new ArrayList<>();
    for (int id : addSpecial ? prefix : new int[0]) {
      out.add(id);
    }
    int at = 0;
    if (addedPattern != null) {
      Matcher m = addedPattern.matcher(text);
      while (m.find()) {
        encodeOrdinary(text.substring(at, m.start()), out);
        out.add(added.get(m.group()));
        at = m.end();
      }
    }
    encodeOrdinary(text.substring(at), out);
    for (int id : addSpecial ? suffix : new int[0]) {
      out.add(id);
    }
    return out.stream().mapToInt(Integer::intValue).toArray();
  }

  private void encodeOrdinary(String text, List<Integer> out) {
    if (text.isEmpty()) {
      return;
    }
    String t = nfc ? Normalizer.normalize(text, Normalizer.Form.NFC) : text;
    if (addPrefixSpace && !t.startsWith(" ")) {
      t = " " + t;
    }
    List<String> pieces = List.of(t);
    for (Pattern p : splits) {
      List<String> next = new ArrayList<>();
      for (String piece : pieces) {
        Matcher m = p.matcher(piece);
        int at = 0;
        while (m.find()) {
          if (m.start() > at) {
            next.add(piece.substring(at, m.start()));
          }
          if (m.end() > m.start()) {
            next.add(m.group());
          }
          at = m.end();
        }
        if (at < piece.length()) {
          next.add(piece.substring(at));
        }
      }
      pieces = next;
    }
    for (String piece : pieces) {
      for (int id : cache.computeIfAbsent(piece, this::bpe)) {
        out.add(id);
      }
    }
  }

  /** One pre-token: its bytes in GPT-2's alphabet, merged by rank. */
  private int[] bpe(String piece) {
    byte[] bytes = piece.getBytes(StandardCharsets.UTF_8);
    StringBuilder mapped = new StringBuilder(bytes.length);
    List<String> symbols = new ArrayList<>(bytes.length);
    for (byte b : bytes) {
      char c = BYTE_TO_CHAR[b & 0xFF];
      mapped.append(c);
      symbols.add(String.valueOf(c));
    }
    if (ignoreMerges && vocab.containsKey(mapped.toString())) {
      return new int[] {vocab.get(mapped.toString())};
    }
    while (symbols.size() > 1) {
      int best = Integer.MAX_VALUE;
      int where = -1;
      for (int i = 0; i + 1 < symbols.size(); i++) {
        Integer r = ranks.get(symbols.get(i) + " " + symbols.get(i + 1));
        if (r != null && r < best) {
          best = r;
          where = i;
        }
      }
      if (where < 0) {
        break;
      }
      String left = symbols.get(where);
      String right = symbols.get(where + 1);
      List<String> merged = new ArrayList<>(symbols.size());
      for (int i = 0; i < symbols.size(); i++) {
        if (i + 1 < symbols.size() && symbols.get(i).equals(left) && symbols.get(i + 1).equals(right)) {
          merged.add(left + right);
          i++;
        } else {
          merged.add(symbols.get(i));
        }
      }
      symbols = merged;
    }
    int[] ids = new int[symbols.size()];
    for (int i = 0; i < ids.length; i++) {
      Integer id = vocab.get(symbols.get(i));
      if (id == null) {
        throw new IllegalStateException("'" + symbols.get(i) + "' of '" + piece + "' is not in the vocabulary");
      }
      ids[i] = id;
    }
    return ids;
  }

  /** The text of {@code ids}; special tokens left out when {@code skipSpecial}. Invalid UTF-8 becomes U+FFFD. */
  @Override
  public String decode(int[] ids, boolean skipSpecial) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    for (int id : ids) {
      if (id < 0 || id >= tokens.length || tokens[id] == null || (skipSpecial && special[id])) {
        continue;
      }
      String t = tokens[id];
      if (added.containsKey(t) && !vocab.containsKey(t)) {
        bytes.writeBytes(t.getBytes(StandardCharsets.UTF_8));
        continue;
      }
      for (int i = 0; i < t.length(); i++) {
        Integer b = CHAR_TO_BYTE.get(t.charAt(i));
        if (b != null) {
          bytes.write(b);
        } else {
          bytes.writeBytes(String.valueOf(t.charAt(i)).getBytes(StandardCharsets.UTF_8));
        }
      }
    }
    return bytes.toString(StandardCharsets.UTF_8);
  }
}
