package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.ptx.PtxSyntaxException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** One statement of a function body, with the 1-based source line where it starts (0 for inserted ones). */
public sealed interface PtxStatement {

  int line();

  /** The statement as PTX text, on one line, without indentation. */
  String print();

  /** A directive: {@code .reg}, {@code .param}, {@code .shared}, {@code .local}, {@code .pragma}, {@code .loc}. */
  record Directive(String text, boolean terminated, int line) implements PtxStatement {
    @Override
    public String print() {
      return terminated ? text + ";" : text;
    }
  }

  record Label(String name, int line) implements PtxStatement {
    @Override
    public String print() {
      return name + ":";
    }
  }

  /** The start of a nested scope ({@code {}), as nvcc emits around call sequences and inline asm. */
  record BlockOpen(int line) implements PtxStatement {
    @Override
    public String print() {
      return "{";
    }
  }

  record BlockClose(int line) implements PtxStatement {
    @Override
    public String print() {
      return "}";
    }
  }

  /**
   * An instruction: {@code [@[!]pred] opcode[.mod...] operand, ...;}. Operands are kept as text, split at
   * commas outside brackets, braces and parentheses: {@code %r1}, {@code 42}, {@code [%rd1+8]},
   * {@code {%r1, %r2}}, {@code (param0, param1)}.
   *
   * @param guard the predicate guard without {@code @} ({@code %p1}, {@code !%p1}), or null
   */
  record Instruction(String guard, String opcode, List<String> operands, int line) implements PtxStatement {

    private static final Pattern SHAPE = Pattern.compile("^(?:@(!?%?[\\w$]+)\\s+)?([A-Za-z][\\w.:\\-]*)\\s*(.*)$",
        Pattern.DOTALL);

    public Instruction {
      operands = List.copyOf(operands);
    }

    static Instruction parse(String text, int line) {
      Matcher m = SHAPE.matcher(text.strip());
      if (!m.matches()) {
        throw new PtxSyntaxException(line, "cannot read instruction '" + PtxModule.abbreviate(text) + "'");
      }
      return new Instruction(m.group(1), m.group(2), splitOperands(m.group(3), line), line);
    }

    /** The opcode without modifiers: {@code ld} for {@code ld.global.nc.v4.u32}. */
    public String root() {
      int dot = opcode.indexOf('.');
      return dot < 0 ? opcode : opcode.substring(0, dot);
    }

    /** The modifiers after the root, in order: {@code [global, nc, v4, u32]}. */
    public List<String> modifiers() {
      int dot = opcode.indexOf('.');
      return dot < 0 ? List.of() : Arrays.asList(opcode.substring(dot + 1).split("\\."));
    }

    public Instruction withOperands(List<String> newOperands) {
      return new Instruction(guard, opcode, newOperands, line);
    }

    @Override
    public String print() {
      StringBuilder s = new StringBuilder();
      if (guard != null) {
        s.append('@').append(guard).append(' ');
      }
      s.append(opcode);
      if (!operands.isEmpty()) {
        s.append(" \t").append(String.join(", ", operands));
      }
      return s.append(';').toString();
    }

    static List<String> splitOperands(String text, int line) {
      List<String> out = new ArrayList<>();
      String t = text.strip();
      if (t.isEmpty()) {
        return out;
      }
      int depth = 0;
      StringBuilder cur = new StringBuilder();
      for (int i = 0; i < t.length(); i++) {
        char c = t.charAt(i);
        if (c == '[' || c == '{' || c == '(') {
          depth++;
        } else if (c == ']' || c == '}' || c == ')') {
          depth--;
        }
        if (c == ',' && depth == 0) {
          out.add(normalize(cur));
          cur.setLength(0);
        } else {
          cur.append(c);
        }
      }
      if (depth != 0) {
        throw new PtxSyntaxException(line, "unbalanced brackets in operands '" + PtxModule.abbreviate(text) + "'");
      }
      out.add(normalize(cur));
      return out;
    }

    private static String normalize(CharSequence operand) {
      return operand.toString().strip().replaceAll("\\s+", " ");
    }
  }
}
