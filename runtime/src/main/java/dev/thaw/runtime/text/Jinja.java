package dev.thaw.runtime.text;

import static dev.thaw.runtime.text.PyValues.UNDEFINED;
import static dev.thaw.runtime.text.PyValues.truthy;

import dev.thaw.runtime.text.JinjaLexer.Kind;
import dev.thaw.runtime.text.JinjaLexer.Piece;
import dev.thaw.runtime.text.PyValues.Callable;
import dev.thaw.runtime.text.PyValues.Namespace;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The subset of Jinja that chat templates are written in, parsed once and rendered many times: {@code if / elif /
 * else}, {@code for} (with {@code loop}, a filter condition, {@code else}, {@code break} and {@code continue}),
 * {@code set} (names, tuples, namespace attributes, blocks), {@code macro}, Hugging Face's {@code generation}
 * block, and expressions with Jinja's precedence, filters, tests and the Python methods of strings and dicts that
 * templates call. Scoping is Jinja's: a loop body's assignments stay in it (hence {@code namespace}), an {@code if}'s
 * do not.
 */
final class Jinja {

  private final List<Node> body;

  private Jinja(List<Node> body) {
    this.body = body;
  }

  static Jinja compile(String source) {
    Parser p = new Parser(JinjaLexer.cut(source));
    List<Node> nodes = p.block(Set.of());
    if (p.at < p.pieces.size()) {
      Piece extra = p.pieces.get(p.at);
      throw new TemplateException("line " + extra.line() + ": unexpected '" + extra.content() + "'");
    }
    return new Jinja(nodes);
  }

  String render(Map<String, Object> context, Map<String, Object> globals) {
    Scope root = new Scope(null);
    root.vars.putAll(globals);
    for (Map.Entry<String, Object> e : context.entrySet()) {
      root.vars.put(e.getKey(), PyValues.of(e.getValue()));
    }
    StringBuilder out = new StringBuilder();
    run(body, new Scope(root), out);
    return out.toString();
  }

  // ---- nodes ----

  private sealed interface Node permits Text, Output, If, For, SetVar, SetBlock, Macro, Control, Block {}

  private record Text(String text) implements Node {}

  private record Output(Expr expr) implements Node {}

  private record If(List<Expr> conditions, List<List<Node>> branches, List<Node> otherwise) implements Node {}

  private record For(List<String> targets, Expr iterable, Expr filter, List<Node> body, List<Node> otherwise)
      implements Node {}

  /** {@code set a = x}, {@code set a, b = x}, {@code set ns.a = x}. */
  private record SetVar(List<String> targets, String attribute, Expr value) implements Node {}

  private record SetBlock(String name, List<Node> body) implements Node {}

  private record Macro(String name, List<String> params, List<Expr> defaults, List<Node> body) implements Node {}

  /** {@code break} or {@code continue}. */
  private record Control(boolean isBreak) implements Node {}

  /** A block that renders its body as it is ({@code generation}). */
  private record Block(List<Node> body) implements Node {}

  private static final class LoopControl extends RuntimeException {
    final boolean isBreak;

    LoopControl(boolean isBreak) {
      super(null, null, false, false);
      this.isBreak = isBreak;
    }
  }

  private static final class Scope {
    final Scope parent;
    final Map<String, Object> vars = new HashMap<>();

    Scope(Scope parent) {
      this.parent = parent;
    }

    Object get(String name) {
      for (Scope s = this; s != null; s = s.parent) {
        if (s.vars.containsKey(name)) {
          return s.vars.get(name);
        }
      }
      return UNDEFINED;
    }
  }

  // ---- rendering ----

  private void run(List<Node> nodes, Scope scope, StringBuilder out) {
    for (Node n : nodes) {
      if (n instanceof Text t) {
        out.append(t.text());
      } else if (n instanceof Output o) {
        out.append(PyValues.str(o.expr().eval(scope)));
      } else if (n instanceof If i) {
        boolean done = false;
        for (int k = 0; k < i.conditions().size() && !done; k++) {
          if (truthy(i.conditions().get(k).eval(scope))) {
            run(i.branches().get(k), scope, out);
            done = true;
          }
        }
        if (!done) {
          run(i.otherwise(), scope, out);
        }
      } else if (n instanceof For f) {
        loop(f, scope, out);
      } else if (n instanceof SetVar s) {
        assign(s, scope);
      } else if (n instanceof SetBlock s) {
        StringBuilder b = new StringBuilder();
        run(s.body(), new Scope(scope), b);
        scope.vars.put(s.name(), b.toString());
      } else if (n instanceof Macro m) {
        scope.vars.put(m.name(), macro(m, scope));
      } else if (n instanceof Control c) {
        throw new LoopControl(c.isBreak());
      } else if (n instanceof Block b) {
        run(b.body(), scope, out);
      }
    }
  }

  private void loop(For f, Scope scope, StringBuilder out) {
    List<Object> items = new ArrayList<>();
    for (Object item : PyValues.iterate(f.iterable().eval(scope))) {
      if (f.filter() == null) {
        items.add(item);
      } else {
        Scope s = new Scope(scope);
        bind(f.targets(), item, s);
        if (truthy(f.filter().eval(s))) {
          items.add(item);
        }
      }
    }
    if (items.isEmpty()) {
      run(f.otherwise(), scope, out);
      return;
    }
    int n = items.size();
    for (int i = 0; i < n; i++) {
      Scope s = new Scope(scope);
      bind(f.targets(), items.get(i), s);
      Map<String, Object> info = new LinkedHashMap<>();
      info.put("index", (long) i + 1);
      info.put("index0", (long) i);
      info.put("revindex", (long) (n - i));
      info.put("revindex0", (long) (n - i - 1));
      info.put("first", i == 0);
      info.put("last", i == n - 1);
      info.put("length", (long) n);
      info.put("previtem", i > 0 ? items.get(i - 1) : UNDEFINED);
      info.put("nextitem", i < n - 1 ? items.get(i + 1) : UNDEFINED);
      int at = i;
      info.put("cycle", (Callable) (args, kw) -> args.isEmpty() ? UNDEFINED : args.get(at % args.size()));
      s.vars.put("loop", info);
      try {
        run(f.body(), s, out);
      } catch (LoopControl c) {
        if (c.isBreak) {
          break;
        }
      }
    }
  }

  private static void bind(List<String> targets, Object item, Scope s) {
    if (targets.size() == 1) {
      s.vars.put(targets.get(0), item);
      return;
    }
    List<Object> parts = PyValues.iterate(item);
    if (parts.size() != targets.size()) {
      throw new TemplateException("cannot unpack " + parts.size() + " values into " + targets.size() + " names");
    }
    for (int i = 0; i < targets.size(); i++) {
      s.vars.put(targets.get(i), parts.get(i));
    }
  }

  private static void assign(SetVar s, Scope scope) {
    Object v = s.value().eval(scope);
    if (s.attribute() != null) {
      Object target = scope.get(s.targets().get(0));
      if (!(target instanceof Namespace ns)) {
        throw new TemplateException("cannot set '" + s.attribute() + "' on a " + PyValues.typeName(target)
            + " (only a namespace's attributes can be set)");
      }
      ns.attributes.put(s.attribute(), v);
      return;
    }
    bind(s.targets(), v, scope);
  }

  private Callable macro(Macro m, Scope defined) {
    return (args, kwargs) -> {
      Scope s = new Scope(defined);
      for (int i = 0; i < m.params().size(); i++) {
        String p = m.params().get(i);
        Object v = i < args.size() ? args.get(i) : kwargs.containsKey(p) ? kwargs.get(p)
            : m.defaults().get(i) != null ? m.defaults().get(i).eval(defined) : UNDEFINED;
        s.vars.put(p, v);
      }
      StringBuilder b = new StringBuilder();
      run(m.body(), s, b);
      return b.toString();
    };
  }

  // ---- statements ----

  private static final class Parser {
    final List<Piece> pieces;
    int at;

    Parser(List<Piece> pieces) {
      this.pieces = pieces;
    }

    /** Nodes up to a statement whose first word is in {@code ends} (left unconsumed) or the end. */
    List<Node> block(Set<String> ends) {
      List<Node> nodes = new ArrayList<>();
      while (at < pieces.size()) {
        Piece p = pieces.get(at);
        if (p.kind() == Kind.TEXT) {
          nodes.add(new Text(p.content()));
          at++;
          continue;
        }
        if (p.kind() == Kind.OUTPUT) {
          nodes.add(new Output(expression(p)));
          at++;
          continue;
        }
        String word = firstWord(p.content());
        if (ends.contains(word)) {
          return nodes;
        }
        at++;
        nodes.add(statement(word, p));
      }
      if (!ends.isEmpty()) {
        throw new TemplateException("a block is never closed: the template ends where one of " + ends
            + " was expected");
      }
      return nodes;
    }

    private Node statement(String word, Piece p) {
      Tokens t = new Tokens(p.content(), p.line());
      t.next(); // the word
      switch (word) {
        case "if" -> {
          List<Expr> conditions = new ArrayList<>();
          List<List<Node>> branches = new ArrayList<>();
          conditions.add(t.expressionToEnd());
          List<Node> otherwise = List.of();
          while (true) {
            branches.add(block(Set.of("elif", "else", "endif")));
            Piece end = expectEnd("endif", p);
            String w = firstWord(end.content());
            at++;
            if (w.equals("elif")) {
              Tokens e = new Tokens(end.content(), end.line());
              e.next();
              conditions.add(e.expressionToEnd());
            } else if (w.equals("else")) {
              otherwise = block(Set.of("endif"));
              expectEnd("endif", p);
              at++;
              break;
            } else {
              break;
            }
          }
          return new If(conditions, branches, otherwise);
        }
        case "for" -> {
          List<String> targets = new ArrayList<>();
          targets.add(t.name());
          while (t.accept(",")) {
            targets.add(t.name());
          }
          t.expectWord("in");
          Expr iterable = t.ternaryNoIf();
          Expr filter = null;
          if (t.acceptWord("if")) {
            filter = t.expression();
          }
          t.end();
          List<Node> body = block(Set.of("else", "endfor"));
          List<Node> otherwise = List.of();
          if (firstWord(expectEnd("endfor", p).content()).equals("else")) {
            at++;
            otherwise = block(Set.of("endfor"));
            expectEnd("endfor", p);
          }
          at++;
          return new For(targets, iterable, filter, body, otherwise);
        }
        case "set" -> {
          List<String> targets = new ArrayList<>();
          targets.add(t.name());
          String attribute = null;
          if (t.accept(".")) {
            attribute = t.name();
          }
          while (attribute == null && t.accept(",")) {
            targets.add(t.name());
          }
          if (t.atEnd() && attribute == null && targets.size() == 1) {
            List<Node> body = block(Set.of("endset"));
            expectEnd("endset", p);
            at++;
            return new SetBlock(targets.get(0), body);
          }
          t.expect("=");
          return new SetVar(targets, attribute, t.expressionToEnd());
        }
        case "macro" -> {
          String name = t.name();
          List<String> params = new ArrayList<>();
          List<Expr> defaults = new ArrayList<>();
          t.expect("(");
          if (!t.accept(")")) {
            do {
              params.add(t.name());
              defaults.add(t.accept("=") ? t.expression() : null);
            } while (t.accept(","));
            t.expect(")");
          }
          t.end();
          List<Node> body = block(Set.of("endmacro"));
          expectEnd("endmacro", p);
          at++;
          return new Macro(name, params, defaults, body);
        }
        case "break", "continue" -> {
          t.end();
          return new Control(word.equals("break"));
        }
        case "generation" -> {
          t.end();
          List<Node> body = block(Set.of("endgeneration"));
          expectEnd("endgeneration", p);
          at++;
          return new Block(body);
        }
        default -> throw new TemplateException("line " + p.line() + ": '{% " + word + " %}' is not a statement "
            + "this template engine reads (if, for, set, macro, break, continue, generation)");
      }
    }

    private Piece expectEnd(String end, Piece opened) {
      if (at >= pieces.size()) {
        throw new TemplateException("line " + opened.line() + ": '{% " + firstWord(opened.content())
            + " %}' is never closed with '{% " + end + " %}'");
      }
      return pieces.get(at);
    }

    private static Expr expression(Piece p) {
      return new Tokens(p.content(), p.line()).expressionToEnd();
    }

    private static String firstWord(String s) {
      int i = 0;
      while (i < s.length() && (Character.isLetterOrDigit(s.charAt(i)) || s.charAt(i) == '_')) {
        i++;
      }
      return s.substring(0, i);
    }
  }

  // ---- expressions ----

  @FunctionalInterface
  interface Expr {
    Object eval(Scope scope);
  }

  private enum T { NAME, STRING, INT, FLOAT, OP, END }

  private record Token(T type, String text, Object value) {}

  /** The tokens of one tag and a recursive-descent parser over them, in Jinja's precedence. */
  private static final class Tokens {
    private final List<Token> tokens = new ArrayList<>();
    private final int line;
    private int at;

    Tokens(String src, int line) {
      this.line = line;
      int i = 0;
      while (i < src.length()) {
        char c = src.charAt(i);
        if (Character.isWhitespace(c)) {
          i++;
        } else if (Character.isLetter(c) || c == '_') {
          int j = i;
          while (j < src.length() && (Character.isLetterOrDigit(src.charAt(j)) || src.charAt(j) == '_')) {
            j++;
          }
          tokens.add(new Token(T.NAME, src.substring(i, j), null));
          i = j;
        } else if (Character.isDigit(c)) {
          int j = i;
          while (j < src.length() && (Character.isDigit(src.charAt(j)) || src.charAt(j) == '_')) {
            j++;
          }
          boolean isFloat = false;
          if (j + 1 < src.length() && src.charAt(j) == '.' && Character.isDigit(src.charAt(j + 1))) {
            isFloat = true;
            j++;
            while (j < src.length() && Character.isDigit(src.charAt(j))) {
              j++;
            }
          }
          if (j < src.length() && (src.charAt(j) == 'e' || src.charAt(j) == 'E')) {
            isFloat = true;
            j++;
            if (j < src.length() && (src.charAt(j) == '+' || src.charAt(j) == '-')) {
              j++;
            }
            while (j < src.length() && Character.isDigit(src.charAt(j))) {
              j++;
            }
          }
          String num = src.substring(i, j).replace("_", "");
          tokens.add(isFloat ? new Token(T.FLOAT, num, Double.parseDouble(num))
              : new Token(T.INT, num, Long.parseLong(num)));
          i = j;
        } else if (c == '\'' || c == '"') {
          StringBuilder b = new StringBuilder();
          int j = i + 1;
          while (j < src.length() && src.charAt(j) != c) {
            char d = src.charAt(j);
            if (d == '\\' && j + 1 < src.length()) {
              j++;
              char e = src.charAt(j);
              switch (e) {
                case 'n' -> b.append('\n');
                case 't' -> b.append('\t');
                case 'r' -> b.append('\r');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case '0' -> b.append('\0');
                case 'u' -> {
                  b.append((char) Integer.parseInt(src.substring(j + 1, j + 5), 16));
                  j += 4;
                }
                case 'x' -> {
                  b.append((char) Integer.parseInt(src.substring(j + 1, j + 3), 16));
                  j += 2;
                }
                case '\\', '\'', '"' -> b.append(e);
                default -> b.append('\\').append(e);
              }
            } else {
              b.append(d);
            }
            j++;
          }
          if (j >= src.length()) {
            throw new TemplateException("line " + line + ": a string is never closed");
          }
          tokens.add(new Token(T.STRING, src.substring(i, j + 1), b.toString()));
          i = j + 1;
        } else {
          String op = null;
          for (String o : List.of("**", "//", "==", "!=", "<=", ">=")) {
            if (src.startsWith(o, i)) {
              op = o;
              break;
            }
          }
          if (op == null) {
            if ("+-*/%~<>()[]{},.:|=".indexOf(c) < 0) {
              throw new TemplateException("line " + line + ": unexpected character '" + c + "'");
            }
            op = String.valueOf(c);
          }
          tokens.add(new Token(T.OP, op, null));
          i += op.length();
        }
      }
      tokens.add(new Token(T.END, "", null));
    }

    Token peek() {
      return tokens.get(at);
    }

    Token next() {
      return tokens.get(at++);
    }

    boolean atEnd() {
      return peek().type() == T.END;
    }

    boolean accept(String op) {
      if (peek().type() == T.OP && peek().text().equals(op)) {
        at++;
        return true;
      }
      return false;
    }

    boolean acceptWord(String w) {
      if (peek().type() == T.NAME && peek().text().equals(w)) {
        at++;
        return true;
      }
      return false;
    }

    boolean peekWord(String w) {
      return peek().type() == T.NAME && peek().text().equals(w);
    }

    void expect(String op) {
      if (!accept(op)) {
        throw error("expected '" + op + "'");
      }
    }

    void expectWord(String w) {
      if (!acceptWord(w)) {
        throw error("expected '" + w + "'");
      }
    }

    String name() {
      Token t = next();
      if (t.type() != T.NAME) {
        at--;
        throw error("expected a name");
      }
      return t.text();
    }

    void end() {
      if (!atEnd()) {
        throw error("unexpected '" + peek().text() + "'");
      }
    }

    TemplateException error(String what) {
      return new TemplateException("line " + line + ": " + what + " at '" + peek().text() + "'");
    }

    Expr expressionToEnd() {
      Expr e = expression();
      end();
      return e;
    }

    Expr expression() {
      Expr e = ternaryNoIf();
      if (acceptWord("if")) {
        Expr cond = or();
        Expr otherwise = acceptWord("else") ? expression() : s -> UNDEFINED;
        Expr then = e;
        return s -> truthy(cond.eval(s)) ? then.eval(s) : otherwise.eval(s);
      }
      return e;
    }

    /** An expression without a trailing conditional (a for loop's iterable, whose {@code if} filters). */
    Expr ternaryNoIf() {
      return or();
    }

    private Expr or() {
      Expr left = and();
      while (acceptWord("or")) {
        Expr l = left;
        Expr r = and();
        left = s -> {
          Object v = l.eval(s);
          return truthy(v) ? v : r.eval(s);
        };
      }
      return left;
    }

    private Expr and() {
      Expr left = not();
      while (acceptWord("and")) {
        Expr l = left;
        Expr r = not();
        left = s -> {
          Object v = l.eval(s);
          return truthy(v) ? r.eval(s) : v;
        };
      }
      return left;
    }

    private Expr not() {
      if (acceptWord("not")) {
        Expr e = not();
        return s -> !truthy(e.eval(s));
      }
      return compare();
    }

    private Expr compare() {
      Expr left = math1();
      while (true) {
        String op;
        if (peek().type() == T.OP && List.of("==", "!=", "<", ">", "<=", ">=").contains(peek().text())) {
          op = next().text();
        } else if (acceptWord("in")) {
          op = "in";
        } else if (peekWord("not") && tokens.get(at + 1).type() == T.NAME && tokens.get(at + 1).text().equals("in")) {
          at += 2;
          op = "not in";
        } else {
          return left;
        }
        Expr l = left;
        Expr r = math1();
        String o = op;
        left = s -> {
          Object a = l.eval(s);
          Object b = r.eval(s);
          return switch (o) {
            case "==" -> PyValues.equal(a, b);
            case "!=" -> !PyValues.equal(a, b);
            case "<" -> PyValues.compare(a, b) < 0;
            case ">" -> PyValues.compare(a, b) > 0;
            case "<=" -> PyValues.compare(a, b) <= 0;
            case ">=" -> PyValues.compare(a, b) >= 0;
            case "in" -> PyValues.contains(b, a);
            default -> !PyValues.contains(b, a);
          };
        };
      }
    }

    private Expr math1() {
      Expr left = concat();
      while (peek().type() == T.OP && (peek().text().equals("+") || peek().text().equals("-"))) {
        String op = next().text();
        Expr l = left;
        Expr r = concat();
        left = s -> op.equals("+") ? add(l.eval(s), r.eval(s)) : arith("-", l.eval(s), r.eval(s));
      }
      return left;
    }

    private Expr concat() {
      Expr left = math2();
      while (accept("~")) {
        Expr l = left;
        Expr r = math2();
        left = s -> PyValues.str(l.eval(s)) + PyValues.str(r.eval(s));
      }
      return left;
    }

    private Expr math2() {
      Expr left = pow();
      while (peek().type() == T.OP && List.of("*", "/", "//", "%").contains(peek().text())) {
        String op = next().text();
        Expr l = left;
        Expr r = pow();
        left = s -> arith(op, l.eval(s), r.eval(s));
      }
      return left;
    }

    private Expr pow() {
      Expr left = unary();
      while (accept("**")) {
        Expr l = left;
        Expr r = unary();
        left = s -> arith("**", l.eval(s), r.eval(s));
      }
      return left;
    }

    private Expr unary() {
      if (accept("-")) {
        Expr e = unaryNoFilter();
        return filters(s -> arith("-", 0L, e.eval(s)));
      }
      if (accept("+")) {
        return unary();
      }
      return filters(postfix(primary()));
    }

    private Expr unaryNoFilter() {
      if (accept("-")) {
        Expr e = unaryNoFilter();
        return s -> arith("-", 0L, e.eval(s));
      }
      return postfix(primary());
    }

    private Expr primary() {
      Token t = next();
      switch (t.type()) {
        case STRING -> {
          StringBuilder b = new StringBuilder((String) t.value());
          while (peek().type() == T.STRING) {
            b.append((String) next().value());
          }
          String v = b.toString();
          return s -> v;
        }
        case INT, FLOAT -> {
          Object v = t.value();
          return s -> v;
        }
        case NAME -> {
          String n = t.text();
          switch (n) {
            case "true", "True" -> {
              return s -> Boolean.TRUE;
            }
            case "false", "False" -> {
              return s -> Boolean.FALSE;
            }
            case "none", "None" -> {
              return s -> null;
            }
            default -> {
              return s -> s.get(n);
            }
          }
        }
        case OP -> {
          switch (t.text()) {
            case "(" -> {
              if (accept(")")) {
                return s -> new ArrayList<>();
              }
              Expr e = expression();
              if (accept(",")) {
                List<Expr> items = new ArrayList<>(List.of(e));
                while (!accept(")")) {
                  items.add(expression());
                  if (!accept(",")) {
                    expect(")");
                    break;
                  }
                }
                return s -> evalAll(items, s);
              }
              expect(")");
              return e;
            }
            case "[" -> {
              List<Expr> items = new ArrayList<>();
              while (!accept("]")) {
                items.add(expression());
                if (!accept(",")) {
                  expect("]");
                  break;
                }
              }
              return s -> evalAll(items, s);
            }
            case "{" -> {
              List<Expr> keys = new ArrayList<>();
              List<Expr> values = new ArrayList<>();
              while (!accept("}")) {
                keys.add(expression());
                expect(":");
                values.add(expression());
                if (!accept(",")) {
                  expect("}");
                  break;
                }
              }
              return s -> {
                Map<String, Object> m = new LinkedHashMap<>();
                for (int i = 0; i < keys.size(); i++) {
                  m.put(PyValues.str(keys.get(i).eval(s)), values.get(i).eval(s));
                }
                return m;
              };
            }
            default -> {
              at--;
              throw error("unexpected");
            }
          }
        }
        default -> {
          at--;
          throw error("an expression is missing");
        }
      }
    }

    private Expr postfix(Expr e) {
      while (true) {
        if (accept(".")) {
          Token t = next();
          if (t.type() == T.INT) {
            long i = (Long) t.value();
            Expr base = e;
            e = s -> PyValues.index(base.eval(s), i);
          } else if (t.type() == T.NAME) {
            String n = t.text();
            Expr base = e;
            e = s -> Builtins.attribute(base.eval(s), n);
          } else {
            at--;
            throw error("expected an attribute name");
          }
        } else if (accept("[")) {
          Expr base = e;
          Expr[] parts = new Expr[3];
          boolean slice = false;
          int part = 0;
          while (!accept("]")) {
            if (accept(":")) {
              slice = true;
              part++;
              if (part > 2) {
                throw error("a slice has at most three parts");
              }
              continue;
            }
            parts[part] = expression();
          }
          if (slice) {
            Expr a = parts[0];
            Expr b = parts[1];
            Expr c = parts[2];
            e = s -> PyValues.slice(base.eval(s), bound(a, s), bound(b, s), bound(c, s));
          } else {
            Expr key = parts[0];
            if (key == null) {
              throw error("an empty subscript");
            }
            e = s -> Builtins.item(base.eval(s), key.eval(s));
          }
        } else if (peek().type() == T.OP && peek().text().equals("(")) {
          next();
          Expr callee = e;
          Args args = arguments();
          e = s -> call(callee.eval(s), args, s);
        } else {
          return e;
        }
      }
    }

    private static Long bound(Expr e, Scope s) {
      if (e == null) {
        return null;
      }
      Object v = e.eval(s);
      return v == null ? null : PyValues.integer(v);
    }

    /** Arguments after an opened {@code (}, through its {@code )}. */
    private Args arguments() {
      List<Expr> positional = new ArrayList<>();
      Map<String, Expr> named = new LinkedHashMap<>();
      while (!accept(")")) {
        if (peek().type() == T.NAME && tokens.get(at + 1).type() == T.OP && tokens.get(at + 1).text().equals("=")) {
          String n = next().text();
          next();
          named.put(n, expression());
        } else {
          positional.add(expression());
        }
        if (!accept(",")) {
          expect(")");
          break;
        }
      }
      return new Args(positional, named);
    }

    private Expr filters(Expr e) {
      while (true) {
        if (accept("|")) {
          String name = dottedName();
          Args args = peek().type() == T.OP && peek().text().equals("(") ? open() : Args.NONE;
          Expr base = e;
          e = s -> Builtins.filter(name, base.eval(s), args.positional(s), args.named(s));
        } else if (peekWord("is")) {
          next();
          boolean negate = acceptWord("not");
          String name = dottedName();
          Args args;
          if (peek().type() == T.OP && peek().text().equals("(")) {
            args = open();
          } else if (takesTestArgument(peek())) {
            Expr arg = postfix(primary());
            args = new Args(List.of(arg), Map.of());
          } else {
            args = Args.NONE;
          }
          Expr base = e;
          e = s -> {
            boolean r = Builtins.test(name, base.eval(s), args.positional(s));
            return negate != r;
          };
        } else {
          return e;
        }
      }
    }

    /** Jinja's rule for a test's one argument without parentheses ({@code is divisibleby 3}). */
    private static boolean takesTestArgument(Token t) {
      return switch (t.type()) {
        case STRING, INT, FLOAT -> true;
        case NAME -> !Set.of("else", "or", "and", "if", "is", "in", "not").contains(t.text());
        case OP -> t.text().equals("[") || t.text().equals("{");
        default -> false;
      };
    }

    private Args open() {
      next();
      return arguments();
    }

    private String dottedName() {
      StringBuilder n = new StringBuilder(name());
      while (peek().type() == T.OP && peek().text().equals(".") && tokens.get(at + 1).type() == T.NAME) {
        next();
        n.append('.').append(name());
      }
      return n.toString();
    }
  }

  private record Args(List<Expr> positionalExprs, Map<String, Expr> namedExprs) {
    static final Args NONE = new Args(List.of(), Map.of());

    List<Object> positional(Scope s) {
      return evalAll(positionalExprs, s);
    }

    Map<String, Object> named(Scope s) {
      Map<String, Object> m = new LinkedHashMap<>();
      namedExprs.forEach((k, v) -> m.put(k, v.eval(s)));
      return m;
    }
  }

  private static List<Object> evalAll(List<Expr> exprs, Scope s) {
    List<Object> out = new ArrayList<>(exprs.size());
    for (Expr e : exprs) {
      out.add(e.eval(s));
    }
    return out;
  }

  private static Object call(Object callee, Args args, Scope s) {
    if (callee instanceof Callable c) {
      return c.call(args.positional(s), args.named(s));
    }
    throw new TemplateException((callee == UNDEFINED ? "an undefined name" : "a " + PyValues.typeName(callee))
        + " is not callable");
  }

  static Object add(Object a, Object b) {
    if (a instanceof String x && b instanceof String y) {
      return x + y;
    }
    if (a instanceof List<?> x && b instanceof List<?> y) {
      List<Object> out = new ArrayList<>(x);
      out.addAll(y);
      return out;
    }
    return arith("+", a, b);
  }

  static Object arith(String op, Object a, Object b) {
    if (!PyValues.isNumber(a) || !PyValues.isNumber(b)) {
      if (op.equals("*") && (a instanceof String || b instanceof String)) {
        String str = a instanceof String x ? x : (String) b;
        long n = PyValues.integer(a instanceof String ? b : a);
        return str.repeat((int) Math.max(0, n));
      }
      throw new TemplateException("unsupported operand types for " + op + ": " + PyValues.typeName(a) + " and "
          + PyValues.typeName(b));
    }
    boolean ints = !(a instanceof Double) && !(b instanceof Double);
    if (ints && !op.equals("/")) {
      long x = PyValues.integer(a);
      long y = PyValues.integer(b);
      return switch (op) {
        case "+" -> x + y;
        case "-" -> x - y;
        case "*" -> x * y;
        case "//" -> {
          if (y == 0) {
            throw new TemplateException("integer division by zero");
          }
          yield Math.floorDiv(x, y);
        }
        case "%" -> {
          if (y == 0) {
            throw new TemplateException("integer modulo by zero");
          }
          yield Math.floorMod(x, y);
        }
        default -> (Object) (y >= 0 ? (long) Math.pow(x, y) : Math.pow(x, y));
      };
    }
    double x = PyValues.number(a);
    double y = PyValues.number(b);
    return switch (op) {
      case "+" -> x + y;
      case "-" -> x - y;
      case "*" -> x * y;
      case "/" -> {
        if (y == 0) {
          throw new TemplateException("division by zero");
        }
        yield x / y;
      }
      case "//" -> Math.floor(x / y);
      case "%" -> x - y * Math.floor(x / y);
      default -> Math.pow(x, y);
    };
  }
}
