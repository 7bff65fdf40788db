package dev.thaw.runtime.ptx;

import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Reads a PTX module's header and the parameter list of every {@code .entry}, laid out as the PTX ABI lays
 * them out in the parameter buffer (each parameter at the next offset aligned to its alignment), which is
 * what {@code cuFuncGetParamInfo} reports for the compiled kernel.
 *
 * <p>Bodies are not interpreted, but every instruction's opcode must be one the PTX ISA (up to 9.0) defines,
 * so text that no JIT would accept is refused here with the line it stopped at.
 */
public final class PtxEntries {

  private static final Pattern VERSION = Pattern.compile("^\\s*\\.version\\s+(\\d+\\.\\d+)\\s*$");
  private static final Pattern TARGET = Pattern.compile("^\\s*\\.target\\s+([\\w, ]+?)\\s*$");
  private static final Pattern ADDRESS_SIZE = Pattern.compile("^\\s*\\.address_size\\s+(\\d+)\\s*$");
  private static final Pattern ENTRY = Pattern.compile("\\.entry\\s+([A-Za-z_$%][\\w$%]*)\\s*\\(");
  /** {@code .param [.attrs] .type [.ptr .space] [.align N] name[ [N] ]}. */
  private static final Pattern PARAM = Pattern.compile(
      "^\\.param\\s+(?:\\.align\\s+(\\d+)\\s+)?\\.(u8|s8|b8|u16|s16|b16|f16|bf16|u32|s32|b32|f32|u64|s64|b64|f64)"
          + "(?:\\s+\\.ptr(?:\\s+\\.(?:global|shared|const|local))?)?(?:\\s+\\.align\\s+(\\d+))?"
          + "\\s+([A-Za-z_$%][\\w$%]*)\\s*(?:\\[\\s*(\\d+)\\s*\\])?$");

  private PtxEntries() {}

  /**
   * Parses {@code ptx}.
   *
   * @throws PtxSyntaxException if a {@code .version} or {@code .target} directive is missing, braces do not
   *     balance, or a parameter declaration is not understood
   */
  public static PtxModuleInfo parse(String ptx) {
    String text = stripComments(ptx);
    String[] lines = text.split("\n", -1);
    String version = null;
    String target = null;
    int addressSize = 64;
    for (int i = 0; i < lines.length && (version == null || target == null); i++) {
      String line = lines[i];
      if (line.isBlank()) {
        continue;
      }
      Matcher m;
      if ((m = VERSION.matcher(line)).matches()) {
        version = m.group(1);
      } else if ((m = TARGET.matcher(line)).matches()) {
        target = m.group(1);
      } else if ((m = ADDRESS_SIZE.matcher(line)).matches()) {
        addressSize = Integer.parseInt(m.group(1));
      } else if (version == null) {
        throw new PtxSyntaxException(i + 1, "expected the .version directive, found '" + abbreviate(line) + "'");
      }
    }
    if (version == null) {
      throw new PtxSyntaxException(1, "missing .version directive");
    }
    if (target == null) {
      throw new PtxSyntaxException(1, "missing .target directive");
    }
    checkBraces(text);
    checkInstructions(text);

    Map<String, ParamLayout> entries = new LinkedHashMap<>();
    Matcher entry = ENTRY.matcher(text);
    while (entry.find()) {
      String name = entry.group(1);
      int open = entry.end() - 1;
      int close = text.indexOf(')', open);
      if (close < 0) {
        throw new PtxSyntaxException(lineOf(text, open), "unterminated parameter list of .entry " + name);
      }
      entries.put(name, parseParams(name, text.substring(open + 1, close), lineOf(text, open)));
    }
    return new PtxModuleInfo(version, target, addressSize, entries);
  }

  private static ParamLayout parseParams(String entry, String list, int line) {
    List<String> names = new ArrayList<>();
    List<ParamType> types = new ArrayList<>();
    List<Integer> sizes = new ArrayList<>();
    List<Integer> aligns = new ArrayList<>();
    if (!list.isBlank()) {
      for (String raw : list.split(",")) {
        String decl = raw.strip().replaceAll("\\s+", " ");
        Matcher m = PARAM.matcher(decl);
        if (!m.matches()) {
          throw new PtxSyntaxException(line, "cannot read parameter '" + abbreviate(decl) + "' of .entry " + entry);
        }
        String scalar = m.group(2);
        int width = widthOf(scalar);
        String align = m.group(1) != null ? m.group(1) : m.group(3);
        String count = m.group(5);
        names.add(m.group(4));
        if (count != null) {
          int n = Integer.parseInt(count);
          sizes.add(n * width);
          types.add(ParamType.BYTES);
          aligns.add(align != null ? Integer.parseInt(align) : width);
        } else {
          sizes.add(width);
          types.add(typeOf(scalar));
          // A .ptr attribute's .align names the pointee's alignment, not the parameter's.
          aligns.add(m.group(1) != null ? Integer.parseInt(m.group(1)) : width);
        }
      }
    }
    return ParamLayout.ofAligned(names, types, sizes, aligns);
  }

  private static int widthOf(String scalar) {
    return switch (scalar) {
      case "u8", "s8", "b8" -> 1;
      case "u16", "s16", "b16", "f16", "bf16" -> 2;
      case "u32", "s32", "b32", "f32" -> 4;
      default -> 8;
    };
  }

  private static ParamType typeOf(String scalar) {
    return switch (scalar) {
      case "u8", "s8", "b8" -> ParamType.INT8;
      case "u16", "s16", "b16", "f16", "bf16" -> ParamType.INT16;
      case "u32", "s32", "b32" -> ParamType.INT32;
      case "f32" -> ParamType.FLOAT32;
      case "f64" -> ParamType.FLOAT64;
      default -> ParamType.INT64;
    };
  }

  /** Replaces comments with spaces, keeping newlines so that line numbers stay right (string literals kept). */
  public static String stripComments(String ptx) {
    StringBuilder out = new StringBuilder(ptx.length());
    int i = 0;
    int n = ptx.length();
    while (i < n) {
      char c = ptx.charAt(i);
      if (c == '/' && i + 1 < n && ptx.charAt(i + 1) == '/') {
        while (i < n && ptx.charAt(i) != '\n') {
          i++;
        }
      } else if (c == '/' && i + 1 < n && ptx.charAt(i + 1) == '*') {
        int end = ptx.indexOf("*/", i + 2);
        int stop = end < 0 ? n : end + 2;
        for (; i < stop; i++) {
          out.append(ptx.charAt(i) == '\n' ? '\n' : ' ');
        }
      } else if (c == '"') {
        int end = i + 1;
        while (end < n && ptx.charAt(end) != '"' && ptx.charAt(end) != '\n') {
          end++;
        }
        out.append(ptx, i, Math.min(end + 1, n));
        i = Math.min(end + 1, n);
      } else {
        out.append(c);
        i++;
      }
    }
    return out.toString();
  }

  private static void checkBraces(String text) {
    int depth = 0;
    int line = 1;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '\n') {
        line++;
      } else if (c == '{') {
        depth++;
      } else if (c == '}') {
        if (--depth < 0) {
          throw new PtxSyntaxException(line, "unexpected '}'");
        }
      }
    }
    if (depth != 0) {
      throw new PtxSyntaxException(line, "unexpected end of file: " + depth + " unclosed '{'");
    }
  }

  /** The instruction names of the PTX ISA, without their {@code .modifiers}. */
  private static final Set<String> OPCODES = Set.of(
      "abs", "activemask", "add", "addc", "alloca", "and", "applypriority", "atom", "bar", "barrier", "bfe",
      "bfi", "bfind", "bmsk", "bra", "brev", "brkpt", "brx", "call", "clusterlaunchcontrol", "clz", "cnot",
      "copysign", "cos", "cp", "createpolicy", "cvt", "cvta", "discard", "div", "dp2a", "dp4a", "elect", "ex2",
      "exit", "fence", "fma", "fns", "getctarank", "griddepcontrol", "isspacep", "istypeof", "ld", "ldmatrix",
      "ldu", "lg2", "lop3", "mad", "mad24", "madc", "mapa", "match", "max", "mbarrier", "membar", "min", "mma",
      "mov", "movmatrix", "mul", "mul24", "multimem", "nanosleep", "neg", "not", "or", "pmevent", "popc",
      "prefetch", "prefetchu", "prmt", "rcp", "red", "redux", "rem", "ret", "rsqrt", "sad", "selp", "set",
      "setmaxnreg", "setp", "shf", "shfl", "shl", "shr", "sin", "slct", "sqrt", "st", "stackrestore",
      "stacksave", "stmatrix", "sub", "subc", "suld", "suq", "sured", "sust", "szext", "tanh", "tcgen05",
      "tensormap", "testp", "tex", "tld4", "trap", "txq", "vabsdiff", "vabsdiff2", "vabsdiff4", "vadd", "vadd2",
      "vadd4", "vavrg2", "vavrg4", "vmad", "vmax", "vmax2", "vmax4", "vmin", "vmin2", "vmin4", "vote", "vset",
      "vset2", "vset4", "vshl", "vshr", "vsub", "vsub2", "vsub4", "wgmma", "wmma", "xor");

  private static final Pattern LABEL = Pattern.compile("^[A-Za-z_$%][\\w$%]*\\s*:\\s*");
  private static final Pattern PREDICATE = Pattern.compile("^@!?%?[\\w$]+\\s+");

  /**
   * Checks the opcode of every statement inside a body. A {@code {} after {@code =} opens an initializer,
   * not a body, and is skipped; one after the start of a statement inside a body is a vector operand.
   */
  private static void checkInstructions(String text) {
    int depth = 0;
    int line = 1;
    int statementLine = 1;
    StringBuilder statement = new StringBuilder();
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '\n') {
        line++;
      }
      if (c == '{') {
        if (statement.toString().strip().endsWith("=")) {
          int close = text.indexOf('}', i);
          for (int j = i; j < close; j++) {
            if (text.charAt(j) == '\n') {
              line++;
            }
          }
          i = close;
          continue;
        }
        if (depth > 0 && !LABEL.matcher(statement.toString().strip()).replaceAll("").isEmpty()) {
          // Inside a body a statement that has begun takes '{' as a vector operand, not a block:
          // ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd1]; wmma.mma.sync ... {%f1, ...}, ...
          int close = text.indexOf('}', i);
          if (close < 0) {
            throw new PtxSyntaxException(line, "unclosed vector operand");
          }
          for (int j = i; j < close; j++) {
            if (text.charAt(j) == '\n') {
              line++;
            }
          }
          statement.append(text, i, close + 1);
          i = close;
          continue;
        }
        if (depth > 0) {
          checkStatement(statement.toString(), statementLine);
        }
        statement.setLength(0);
        depth++;
      } else if (c == '}') {
        checkStatement(statement.toString(), statementLine);
        statement.setLength(0);
        depth--;
      } else if (c == ';') {
        if (depth > 0) {
          checkStatement(statement.toString(), statementLine);
        }
        statement.setLength(0);
      } else {
        if (statement.toString().isBlank() && !Character.isWhitespace(c)) {
          statementLine = line;
        }
        statement.append(c);
      }
    }
  }

  private static void checkStatement(String raw, int line) {
    String s = raw.strip();
    Matcher label;
    while ((label = LABEL.matcher(s)).find()) {
      s = s.substring(label.end());
    }
    if (s.isEmpty() || s.startsWith(".")) {
      return; // a directive (.reg, .shared, .local, .pragma, .loc, ...)
    }
    Matcher predicate = PREDICATE.matcher(s);
    if (predicate.find()) {
      s = s.substring(predicate.end());
    }
    String opcode = s.split("[\\s(]", 2)[0];
    String root = opcode.split("\\.", 2)[0];
    if (!OPCODES.contains(root)) {
      throw new PtxSyntaxException(line, "unknown instruction '" + abbreviate(opcode) + "'");
    }
  }

  private static int lineOf(String text, int index) {
    int line = 1;
    for (int i = 0; i < index; i++) {
      if (text.charAt(i) == '\n') {
        line++;
      }
    }
    return line;
  }

  private static String abbreviate(String s) {
    String t = s.strip();
    return t.length() > 60 ? t.substring(0, 57) + "..." : t;
  }
}
