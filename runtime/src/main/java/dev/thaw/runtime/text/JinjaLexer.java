package dev.thaw.runtime.text;

import java.util.ArrayList;
import java.util.List;

/**
 * Cuts a template into text and tags the way Jinja's lexer does under the settings Hugging Face renders chat
 * templates with ({@code trim_blocks}, {@code lstrip_blocks}, no {@code keep_trailing_newline}): one newline at the
 * end of the source is dropped; {@code -} beside a tag strips all whitespace on that side, {@code +} keeps it; a
 * block or comment tag alone on its line after spaces or tabs takes them away, and the newline right after it.
 */
final class JinjaLexer {

  enum Kind { TEXT, OUTPUT, STATEMENT }

  /** A piece of the template: text as it renders, or a tag's inside (without delimiters and modifiers). */
  record Piece(Kind kind, String content, int line) {}

  private JinjaLexer() {}

  static List<Piece> cut(String source) {
    String src = source.replace("\r\n", "\n");
    if (src.endsWith("\n")) {
      src = src.substring(0, src.length() - 1);
    }
    List<Piece> out = new ArrayList<>();
    int at = 0;
    boolean lineStarting = true;
    boolean stripNext = false;
    while (at <= src.length()) {
      int open = findOpen(src, at);
      String text = src.substring(at, open < 0 ? src.length() : open);
      if (stripNext) {
        text = stripLeading(text);
      }
      if (open < 0) {
        add(out, text, line(src, at));
        break;
      }
      char type = src.charAt(open + 1);
      int inner = open + 2;
      char left = inner < src.length() ? src.charAt(inner) : 0;
      if (left == '-') {
        text = stripTrailing(text);
        inner++;
      } else if (left == '+') {
        inner++;
      } else if (type != '{') {
        // lstrip_blocks: spaces and tabs between the line's start and a block or comment tag go.
        int lineStart = text.lastIndexOf('\n') + 1;
        if ((lineStart > 0 || lineStarting) && isBlank(text, lineStart)) {
          text = text.substring(0, lineStart);
        }
      }
      add(out, text, line(src, at));
      String close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
      int end = type == '#' ? src.indexOf(close, inner) : findClose(src, inner, close);
      if (end < 0) {
        throw new TemplateException("line " + line(src, open) + ": a tag opened with '{" + type + "' is never closed");
      }
      int contentEnd = end;
      char right = end > inner ? src.charAt(end - 1) : 0;
      stripNext = false;
      boolean keep = false;
      if (right == '-') {
        stripNext = true;
        contentEnd--;
      } else if (right == '+' && type != '{') {
        keep = true;
        contentEnd--;
      }
      at = end + 2;
      lineStarting = false;
      if (type != '{' && !stripNext && !keep && at < src.length() && src.charAt(at) == '\n') {
        at++; // trim_blocks
        lineStarting = true;
      }
      if (type == '{') {
        out.add(new Piece(Kind.OUTPUT, src.substring(inner, contentEnd), line(src, open)));
      } else if (type == '%') {
        String stmt = src.substring(inner, contentEnd).strip();
        if (stmt.equals("raw")) {
          int endRaw = findEndRaw(src, at);
          out.add(new Piece(Kind.TEXT, src.substring(at, endRaw), line(src, at)));
          at = src.indexOf("%}", endRaw) + 2;
          continue;
        }
        out.add(new Piece(Kind.STATEMENT, stmt, line(src, open)));
      }
      if (at > src.length()) {
        break;
      }
      if (at == src.length()) {
        break;
      }
    }
    return out;
  }

  private static void add(List<Piece> out, String text, int line) {
    if (!text.isEmpty()) {
      out.add(new Piece(Kind.TEXT, text, line));
    }
  }

  private static int findOpen(String s, int from) {
    for (int i = from; i + 1 < s.length(); i++) {
      if (s.charAt(i) == '{') {
        char c = s.charAt(i + 1);
        if (c == '{' || c == '%' || c == '#') {
          return i;
        }
      }
    }
    return -1;
  }

  /** The close of an expression tag, skipping string literals (a {@code '}}'} inside quotes closes nothing). */
  private static int findClose(String s, int from, String close) {
    char quote = 0;
    for (int i = from; i < s.length(); i++) {
      char c = s.charAt(i);
      if (quote != 0) {
        if (c == '\\') {
          i++;
        } else if (c == quote) {
          quote = 0;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (s.startsWith(close, i)) {
        return i;
      }
    }
    return -1;
  }

  private static int findEndRaw(String s, int from) {
    int i = from;
    while (true) {
      int open = s.indexOf("{%", i);
      if (open < 0) {
        throw new TemplateException("a {% raw %} block is never closed");
      }
      int j = open + 2;
      if (j < s.length() && (s.charAt(j) == '-' || s.charAt(j) == '+')) {
        j++;
      }
      if (s.startsWith("endraw", skipSpaces(s, j))) {
        return open;
      }
      i = open + 2;
    }
  }

  private static int skipSpaces(String s, int i) {
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
      i++;
    }
    return i;
  }

  private static boolean isBlank(String s, int from) {
    for (int i = from; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c != ' ' && c != '\t') {
        return false;
      }
    }
    return true;
  }

  private static String stripLeading(String s) {
    int i = 0;
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
      i++;
    }
    return s.substring(i);
  }

  private static String stripTrailing(String s) {
    int i = s.length();
    while (i > 0 && Character.isWhitespace(s.charAt(i - 1))) {
      i--;
    }
    return s.substring(0, i);
  }

  private static int line(String s, int at) {
    int n = 1;
    for (int i = 0; i < at && i < s.length(); i++) {
      if (s.charAt(i) == '\n') {
        n++;
      }
    }
    return n;
  }
}
