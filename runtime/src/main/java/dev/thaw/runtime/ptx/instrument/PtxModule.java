package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxSyntaxException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A PTX module read into what instrumentation needs to edit, and printed back.
 *
 * <p>Everything outside function bodies (the header, module variables, {@code .section} blocks) is kept
 * verbatim; comments are dropped. Inside a body every statement is read: directives, labels, nested
 * scopes and instructions ({@link PtxStatement}). {@link #print()} of an unedited module is PTX that means
 * the same as the input (only whitespace and comments differ).
 */
public final class PtxModule {

  /** A top-level item: verbatim text or a function. */
  public sealed interface Item permits Verbatim, PtxFunction {}

  /** Top-level text kept as it was: {@code .version}, {@code .target}, variables, {@code .section}. */
  public record Verbatim(String text) implements Item {}

  private static final Pattern LINE_DIRECTIVE = Pattern.compile("^\\.(version|target|address_size|file|loc)\\b");
  private static final Pattern FUNCTION = Pattern.compile("(?:^|\\s)\\.(entry|func)(?=[\\s(])");
  private static final Pattern IDENT = Pattern.compile("^[A-Za-z_$%][\\w$%]*");
  private static final Pattern LABEL = Pattern.compile("^[A-Za-z_$%][\\w$%]*$");
  private static final Pattern ADDRESS_SIZE = Pattern.compile("\\.address_size\\s+(\\d+)");

  private final List<Item> items;

  private PtxModule(List<Item> items) {
    this.items = items;
  }

  /** Reads {@code ptx}. @throws PtxSyntaxException with the line, where it is not understood */
  public static PtxModule parse(String ptx) {
    return new Parser(stripComments(ptx)).module();
  }

  public List<Item> items() {
    return items;
  }

  /** The functions, definitions and declarations, in order. */
  public List<PtxFunction> functions() {
    List<PtxFunction> out = new ArrayList<>();
    for (Item item : items) {
      if (item instanceof PtxFunction f) {
        out.add(f);
      }
    }
    return Collections.unmodifiableList(out);
  }

  /** The definition (with a body) of {@code name}, if the module has one. */
  public Optional<PtxFunction> definition(String name) {
    return functions().stream().filter(f -> f.name().equals(name) && f.hasBody()).findFirst();
  }

  /** The {@code .address_size}, 64 unless stated. */
  public int addressSize() {
    for (Item item : items) {
      if (item instanceof Verbatim v) {
        Matcher m = ADDRESS_SIZE.matcher(v.text());
        if (m.find()) {
          return Integer.parseInt(m.group(1));
        }
      }
    }
    return 64;
  }

  public String print() {
    StringBuilder out = new StringBuilder();
    for (Item item : items) {
      if (item instanceof Verbatim v) {
        out.append(v.text().strip()).append('\n');
      } else if (item instanceof PtxFunction f) {
        out.append('\n');
        f.print(out);
      }
    }
    return out.toString();
  }

  static String abbreviate(String s) {
    String t = s.strip().replaceAll("\\s+", " ");
    return t.length() > 80 ? t.substring(0, 77) + "..." : t;
  }

  /** Replaces comments with spaces, keeping newlines so that line numbers stay right. */
  static String stripComments(String ptx) {
    return PtxEntries.stripComments(ptx);
  }

  /** A single pass over comment-free text; {@code pos} and {@code line} advance together. */
  private static final class Parser {
    private final String text;
    private int pos;
    private int line = 1;

    Parser(String text) {
      this.text = text;
    }

    PtxModule module() {
      List<Item> items = new ArrayList<>();
      StringBuilder stmt = new StringBuilder();
      int stmtLine = 1;
      while (pos < text.length()) {
        char c = text.charAt(pos);
        if (stmt.toString().isBlank()) {
          if (Character.isWhitespace(c)) {
            advance();
            continue;
          }
          stmt.setLength(0);
          stmtLine = line;
          String rest = text.substring(pos, Math.min(text.length(), pos + 16));
          if (LINE_DIRECTIVE.matcher(rest).find()) {
            items.add(new Verbatim(toEndOfLine()));
            continue;
          }
          if (rest.startsWith(".section")) {
            items.add(new Verbatim(toMatchingBrace(true)));
            continue;
          }
        }
        if (c == '"') {
          stmt.append(stringLiteral());
        } else if (c == ';') {
          advance();
          String s = stmt.toString();
          if (FUNCTION.matcher(s).find()) {
            items.add(header(s, stmtLine, null));
          } else {
            items.add(new Verbatim(s.strip() + ";"));
          }
          stmt.setLength(0);
        } else if (c == '{') {
          if (stmt.toString().contains("=")) {
            stmt.append(toMatchingBrace(false));
          } else {
            String s = stmt.toString();
            if (!FUNCTION.matcher(s).find()) {
              throw new PtxSyntaxException(line, "a '{' at the top level that opens neither a function body nor an"
                  + " initializer, after '" + abbreviate(s) + "'");
            }
            advance();
            List<PtxStatement> body = body();
            items.add(header(s, stmtLine, body));
            stmt.setLength(0);
          }
        } else if (c == '}') {
          throw new PtxSyntaxException(line, "unexpected '}'");
        } else {
          stmt.append(c);
          advance();
        }
      }
      if (!stmt.toString().isBlank()) {
        throw new PtxSyntaxException(stmtLine, "unterminated statement '" + abbreviate(stmt.toString()) + "'");
      }
      return new PtxModule(items);
    }

    /** The statements of a body whose '{' was consumed, through its '}'. */
    private List<PtxStatement> body() {
      List<PtxStatement> out = new ArrayList<>();
      int depth = 1;
      StringBuilder stmt = new StringBuilder();
      int stmtLine = line;
      while (true) {
        if (pos >= text.length()) {
          throw new PtxSyntaxException(line, "unexpected end of file inside a function body");
        }
        char c = text.charAt(pos);
        boolean blank = stmt.toString().isBlank();
        if (blank) {
          if (Character.isWhitespace(c)) {
            advance();
            continue;
          }
          stmt.setLength(0);
          stmtLine = line;
          if (c == '.' && LINE_DIRECTIVE.matcher(text.substring(pos, Math.min(text.length(), pos + 16))).find()) {
            out.add(new PtxStatement.Directive(toEndOfLine().strip(), false, stmtLine));
            continue;
          }
          if (c == '{') {
            advance();
            out.add(new PtxStatement.BlockOpen(stmtLine));
            depth++;
            continue;
          }
        }
        if (c == '}') {
          if (!blank) {
            out.add(statement(stmt.toString(), stmtLine));
            stmt.setLength(0);
          }
          advance();
          if (--depth == 0) {
            return out;
          }
          out.add(new PtxStatement.BlockClose(line));
        } else if (c == '{') {
          stmt.append(toMatchingBrace(false)); // a vector operand or an initializer
        } else if (c == '"') {
          stmt.append(stringLiteral());
        } else if (c == ';') {
          advance();
          out.add(statement(stmt.toString(), stmtLine));
          stmt.setLength(0);
        } else if (c == ':' && LABEL.matcher(stmt.toString().strip()).matches()
            && !(pos + 1 < text.length() && text.charAt(pos + 1) == ':')) {
          advance();
          out.add(new PtxStatement.Label(stmt.toString().strip(), stmtLine));
          stmt.setLength(0);
        } else {
          stmt.append(c);
          advance();
        }
      }
    }

    private static PtxStatement statement(String raw, int line) {
      String s = raw.strip();
      if (s.startsWith(".")) {
        return new PtxStatement.Directive(s.replaceAll("\\s+", " "), true, line);
      }
      return PtxStatement.Instruction.parse(s, line);
    }

    /** Splits a function header: {@code prefix}, parameters, {@code suffix}. */
    private static PtxFunction header(String raw, int line, List<PtxStatement> body) {
      String h = raw.strip();
      Matcher kind = FUNCTION.matcher(h);
      kind.find();
      boolean entry = kind.group(1).equals("entry");
      int i = kind.end();
      i = skipSpace(h, i);
      if (!entry && i < h.length() && h.charAt(i) == '(') {
        i = skipSpace(h, matchingParen(h, i, line) + 1); // return parameters
      }
      Matcher id = IDENT.matcher(h.substring(i));
      if (!id.find()) {
        throw new PtxSyntaxException(line, "cannot read the name of '" + abbreviate(h) + "'");
      }
      String name = id.group();
      int nameEnd = i + id.end();
      String prefix = h.substring(0, nameEnd);
      List<String> params = new ArrayList<>();
      int j = skipSpace(h, nameEnd);
      String suffix;
      if (j < h.length() && h.charAt(j) == '(') {
        int close = matchingParen(h, j, line);
        String list = h.substring(j + 1, close);
        if (!list.isBlank()) {
          for (String p : list.split(",")) {
            params.add(p.strip().replaceAll("\\s+", " "));
          }
        }
        suffix = h.substring(close + 1);
      } else {
        suffix = h.substring(nameEnd);
      }
      return new PtxFunction(entry, name, prefix, params, suffix, body, line);
    }

    private static int skipSpace(String s, int i) {
      while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
        i++;
      }
      return i;
    }

    private static int matchingParen(String s, int open, int line) {
      int depth = 0;
      for (int i = open; i < s.length(); i++) {
        if (s.charAt(i) == '(') {
          depth++;
        } else if (s.charAt(i) == ')' && --depth == 0) {
          return i;
        }
      }
      throw new PtxSyntaxException(line, "unclosed '(' in '" + abbreviate(s) + "'");
    }

    private void advance() {
      if (text.charAt(pos) == '\n') {
        line++;
      }
      pos++;
    }

    private String toEndOfLine() {
      int start = pos;
      while (pos < text.length() && text.charAt(pos) != '\n') {
        pos++;
      }
      return text.substring(start, pos);
    }

    /** From the current position through the '}' matching the first '{' met. */
    private String toMatchingBrace(boolean throughFirstBrace) {
      int start = pos;
      int depth = 0;
      int startLine = line;
      boolean opened = false;
      while (pos < text.length()) {
        char c = text.charAt(pos);
        advance();
        if (c == '{') {
          depth++;
          opened = true;
        } else if (c == '}') {
          depth--;
          if (opened && depth == 0) {
            return text.substring(start, pos);
          }
        }
      }
      throw new PtxSyntaxException(startLine, throughFirstBrace ? "unclosed .section" : "unclosed '{'");
    }

    private String stringLiteral() {
      int start = pos;
      advance();
      while (pos < text.length() && text.charAt(pos) != '"' && text.charAt(pos) != '\n') {
        pos++;
      }
      if (pos < text.length() && text.charAt(pos) == '"') {
        pos++;
      }
      return text.substring(start, pos);
    }
  }
}
