package dev.thaw.server.impl;

import dev.thaw.runtime.function.Tokenizer;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * One completion's text as its tokens arrive: the part that is safe to send (never half a UTF-8 character, never the
 * start of what may become a stop string), and where a stop string cut it. The text is the tokens decoded together,
 * special tokens left out, as transformers' {@code decode} writes them.
 */
final class ChoiceText {

  private final Tokenizer tokenizer;
  private final List<String> stops;
  private final int holdBack;
  private final List<Integer> ids = new ArrayList<>();
  /** Tokens that count: those up to the one that completed a stop string. */
  private int counted;
  private String text = "";
  private int sent;
  private boolean stopped;

  ChoiceText(Tokenizer tokenizer, List<String> stops) {
    this.tokenizer = tokenizer;
    this.stops = List.copyOf(stops);
    int longest = 0;
    for (String s : stops) {
      longest = Math.max(longest, s.length());
    }
    this.holdBack = Math.max(0, longest - 1);
  }

  /**
   * Adds the next token (ignored once a stop string matched).
   *
   * @return the text that may be sent now ("" when held back)
   */
  String add(int id) {
    if (stopped) {
      return "";
    }
    ids.add(id);
    counted = ids.size();
    String full = tokenizer.decode(ids.stream().mapToInt(Integer::intValue).toArray(), true);
    int cut = -1;
    for (String s : stops) {
      int at = full.indexOf(s, Math.max(0, sent - s.length()));
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
      }
    }
    if (cut >= 0) {
      stopped = true;
      text = full.substring(0, cut);
      return flush();
    }
    text = full;
    if (full.endsWith("\uFFFD")) {
      return "";
    }
    int safe = Math.max(sent, full.length() - holdBack);
    String delta = full.substring(Math.min(sent, safe), safe);
    sent = safe;
    return delta;
  }

  /** The rest of the text, once no token follows. */
  String flush() {
    if (sent >= text.length()) {
      sent = text.length();
      return "";
    }
    String rest = text.substring(sent);
    sent = text.length();
    return rest;
  }

  /** True once a stop string ended the text. */
  boolean stopped() {
    return stopped;
  }

  String text() {
    return text;
  }

  /** The tokens that made the text (up to the one that completed a stop string). */
  int tokens() {
    return counted;
  }

  /** A token as OpenAI's log-probabilities name it: its text, or {@code bytes:\xNN...} when not whole UTF-8. */
  static String tokenString(Tokenizer tokenizer, int id) {
    byte[] b = tokenizer.bytes(id);
    try {
      return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
          .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(b)).toString();
    } catch (CharacterCodingException e) {
      StringBuilder s = new StringBuilder("bytes:");
      for (byte x : b) {
        s.append(String.format("\\x%02x", x & 0xff));
      }
      return s.toString();
    }
  }
}
