package dev.thaw.runtime.ptx.instrument;

import java.util.ArrayList;
import java.util.List;

/**
 * A {@code .entry} or {@code .func}, definition or declaration: its header split around the parameter list
 * so that parameters can be added, and its body as statements.
 *
 * <p>The header prints as {@code prefix ( params ) suffix}: {@code prefix} runs from the linkage directive
 * to the name (a {@code .func}'s return parameters included), {@code suffix} holds what follows the
 * parameter list ({@code .maxntid 256, 1, 1}, {@code .noreturn}).
 */
public final class PtxFunction implements PtxModule.Item {

  private final boolean entry;
  private final String name;
  private final String prefix;
  private final List<String> params;
  private final String suffix;
  private final List<PtxStatement> body;
  private final int line;

  PtxFunction(boolean entry, String name, String prefix, List<String> params, String suffix,
      List<PtxStatement> body, int line) {
    this.entry = entry;
    this.name = name;
    this.prefix = prefix;
    this.params = new ArrayList<>(params);
    this.suffix = suffix;
    this.body = body == null ? null : new ArrayList<>(body);
    this.line = line;
  }

  public boolean isEntry() {
    return entry;
  }

  public String name() {
    return name;
  }

  /** The parameter declarations, e.g. {@code .param .u64 k_param_0}; mutable. */
  public List<String> params() {
    return params;
  }

  /** True for a definition, false for a declaration (a prototype ending in {@code ;}). */
  public boolean hasBody() {
    return body != null;
  }

  /** The body's statements; mutable. */
  public List<PtxStatement> body() {
    if (body == null) {
      throw new IllegalStateException(name + " is a declaration without a body");
    }
    return body;
  }

  /** The line of the header. */
  public int line() {
    return line;
  }

  /** True when the header is {@code .extern}: defined in another module. */
  public boolean isExtern() {
    return prefix.strip().startsWith(".extern");
  }

  void print(StringBuilder out) {
    out.append(prefix);
    if (!params.isEmpty() || entry) {
      out.append("(");
      for (int i = 0; i < params.size(); i++) {
        out.append(i == 0 ? "\n\t" : ",\n\t").append(params.get(i));
      }
      out.append(params.isEmpty() ? ")" : "\n)");
    }
    if (!suffix.isBlank()) {
      out.append('\n').append(suffix.strip());
    }
    if (body == null) {
      out.append(";\n");
      return;
    }
    out.append("\n{\n");
    int depth = 1;
    for (PtxStatement s : body) {
      if (s instanceof PtxStatement.BlockClose) {
        depth--;
      }
      if (s instanceof PtxStatement.Label) {
        out.append(s.print()).append('\n');
      } else {
        out.append("\t".repeat(depth)).append(s.print()).append('\n');
      }
      if (s instanceof PtxStatement.BlockOpen) {
        depth++;
      }
    }
    out.append("}\n");
  }
}
