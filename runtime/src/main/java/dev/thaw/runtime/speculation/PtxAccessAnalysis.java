package dev.thaw.runtime.speculation;

import dev.thaw.runtime.gpu.KernelParam;
import dev.thaw.runtime.gpu.ParamLayout;
import dev.thaw.runtime.gpu.ParamType;
import dev.thaw.runtime.ptx.PtxEntries;
import dev.thaw.runtime.ptx.PtxModuleInfo;
import dev.thaw.runtime.ptx.PtxSyntaxException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Which 8-byte slots of each kernel's parameter buffer a kernel reads through and writes through, from its PTX.
 *
 * <p>A flow-insensitive forward dataflow over registers, per function, to a fixpoint: a register carries the set
 * of parameter slots its value may derive from ({@code ld.param} starts a set; {@code mov}, {@code cvta},
 * {@code add}, {@code mad.wide}, {@code selp} and every other value-producing instruction take the union of their
 * sources'). The address operand of {@code st} and {@code red} marks its slots written; of {@code ld}, {@code ldu}
 * and {@code cp.async} read; of {@code atom} both. {@code red} counts as read-write: it combines with the old
 * value, so the buffer must be resident. Predicated instructions count as executed; branches are ignored (every
 * path counts). Shared, local, const and param-space accesses touch no buffer.
 *
 * <p>Direct calls to {@code .func}s with a body are followed: the callee is summarised in terms of its own
 * {@code .param}s (what it reads and writes through each, which of them its return value derives from) and the
 * summary is applied to the caller's {@code st.param} arguments. What the analysis cannot follow makes the slots
 * involved {@link AccessKind#READ_WRITE} and is reported in {@link EntryAccess#notes()}: a 64-bit value derived
 * from a parameter stored to memory (the pointer escapes), the address of a parameter taken, a call through a
 * register, a call to a function without a body or a recursive one, an unknown instruction addressing memory
 * through a parameter. An access through a pointer that was loaded from memory reaches a buffer no parameter
 * names; the analysis cannot help there and reports it, so that validation's verdict can be read with it.
 *
 * <p>Immutable and thread-safe once made.
 */
public final class PtxAccessAnalysis {

  private static final int READ = 1;
  private static final int WRITE = 2;
  /** Origin bit 0: the value was loaded, 64 bits wide, from memory: a pointer the parameters do not name. */
  private static final int LOADED = 0;

  private static final Pattern FUNC_START = Pattern.compile("\\.(entry|func)\\b");
  private static final Pattern NAME = Pattern.compile("[A-Za-z_$%][\\w$%]*");
  private static final Pattern PARAM = Pattern.compile(
      "^\\.param\\s+(?:\\.align\\s+(\\d+)\\s+)?\\.(u8|s8|b8|u16|s16|b16|f16|bf16|u32|s32|b32|f32|u64|s64|b64|f64)"
          + "(?:\\s+\\.ptr(?:\\s+\\.(?:global|shared|const|local))?)?(?:\\s+\\.align\\s+(\\d+))?"
          + "\\s+([A-Za-z_$%][\\w$%]*)\\s*(?:\\[\\s*(\\d+)\\s*\\])?$");
  private static final Pattern LABEL = Pattern.compile("^[A-Za-z_$%][\\w$%]*\\s*:(?!:)\\s*");
  private static final Pattern PREDICATE = Pattern.compile("^@!?%?[\\w$]+\\s+");
  private static final Pattern ADDRESS = Pattern.compile(
      "^\\[\\s*([A-Za-z_$%][\\w$%.]*)?\\s*(?:\\+\\s*)?(-?(?:0[xX][0-9a-fA-F]+|\\d+))?\\s*\\]$");
  private static final Set<String> NO_DESTINATION = Set.of("st", "red", "bar", "barrier", "bra", "brx", "call",
      "ret", "exit", "trap", "membar", "fence", "prefetch", "prefetchu", "cp", "discard", "applypriority", "sust",
      "sured", "pmevent", "nanosleep", "griddepcontrol", "setmaxnreg", "stmatrix", "brkpt", "mbarrier",
      "tensormap", "multimem", "wgmma", "tcgen05", "stackrestore");

  private final Map<String, EntryAccess> entries;

  private PtxAccessAnalysis(Map<String, EntryAccess> entries) {
    this.entries = Collections.unmodifiableMap(entries);
  }

  /**
   * Analyses every {@code .entry} of {@code ptx}.
   *
   * @throws PtxSyntaxException if {@link PtxEntries} cannot read the module
   */
  public static PtxAccessAnalysis of(String ptx) {
    PtxModuleInfo info = PtxEntries.parse(ptx);
    Map<String, Function> functions = parseFunctions(stripComments(ptx));
    Analyser analyser = new Analyser(functions);
    Map<String, EntryAccess> out = new LinkedHashMap<>();
    info.entries().forEach((name, layout) -> {
      Function f = functions.get(name);
      if (f == null || f.body == null || f.layout.totalSize() != layout.totalSize()) {
        out.put(name, EntryAccess.conservative(name, layout, "the body of .entry " + name + " was not understood"));
        return;
      }
      Summary s = analyser.summary(f);
      byte[] kinds = new byte[slotCount(layout.totalSize())];
      for (int i = 0; i < kinds.length; i++) {
        kinds[i] = (byte) s.slotBits[i];
      }
      out.put(name, new EntryAccess(name, layout, kinds, List.copyOf(s.notes)));
    });
    return new PtxAccessAnalysis(out);
  }

  /** The entries analysed, in the module's order. */
  public Set<String> entries() {
    return entries.keySet();
  }

  /**
   * What {@code entry} does through its parameters.
   *
   * @throws IllegalArgumentException if the module has no such {@code .entry}
   */
  public EntryAccess entry(String entry) {
    EntryAccess e = entries.get(entry);
    if (e == null) {
      throw new IllegalArgumentException("the module has no .entry " + entry);
    }
    return e;
  }

  static int slotCount(int totalSize) {
    return (totalSize + 7) / 8;
  }

  /**
   * One kernel's result: a kind per 8-byte slot of its parameter buffer (slot {@code k} is bytes
   * {@code [8k, 8k + 8)}), or none where no address derives from the slot.
   */
  public static final class EntryAccess {

    private final String entry;
    private final ParamLayout layout;
    private final byte[] slotBits;
    private final List<String> notes;

    EntryAccess(String entry, ParamLayout layout, byte[] slotBits, List<String> notes) {
      this.entry = entry;
      this.layout = layout;
      this.slotBits = slotBits;
      this.notes = notes;
    }

    static EntryAccess conservative(String entry, ParamLayout layout, String why) {
      byte[] all = new byte[PtxAccessAnalysis.slotCount(layout.totalSize())];
      Arrays.fill(all, (byte) (READ | WRITE));
      return new EntryAccess(entry, layout, all, List.of(why));
    }

    public String entry() {
      return entry;
    }

    /** The parameter layout from the {@code .entry}, as {@link PtxEntries} reads it. */
    public ParamLayout layout() {
      return layout;
    }

    public int slotCount() {
      return slotBits.length;
    }

    /** The kind of slot {@code slot}; null when no address derives from it. */
    public AccessKind slotKind(int slot) {
      return AccessKind.ofBits(slotBits[slot]);
    }

    /** The union of the kinds of the slots parameter {@code index} overlaps; null when none. */
    public AccessKind paramKind(int index) {
      var p = layout.get(index);
      int bits = 0;
      for (int s = p.offset() / 8; s < PtxAccessAnalysis.slotCount(p.offset() + p.size()); s++) {
        bits |= slotBits[s];
      }
      return AccessKind.ofBits(bits);
    }

    /** What the analysis could not follow, one line each; empty when it followed everything. */
    public List<String> notes() {
      return notes;
    }

    byte slotBits(int slot) {
      return slotBits[slot];
    }

    @Override
    public String toString() {
      StringBuilder b = new StringBuilder(entry).append('[');
      for (int i = 0; i < slotBits.length; i++) {
        b.append(i == 0 ? "" : ", ").append(i * 8).append(": ").append(slotKind(i));
      }
      return b.append(']').append(notes.isEmpty() ? "" : " " + notes).toString();
    }
  }

  // ---- parsing ----

  private record Param(String name, int offset, int size) {}

  private static final class Function {
    final String name;
    final ParamLayout layout;
    final List<Param> params;
    final List<String> returns;
    final List<String> body;

    Function(String name, ParamLayout layout, List<Param> params, List<String> returns, List<String> body) {
      this.name = name;
      this.layout = layout;
      this.params = params;
      this.returns = returns;
      this.body = body;
    }

    Param param(String name) {
      for (Param p : params) {
        if (p.name.equals(name)) {
          return p;
        }
      }
      return null;
    }
  }

  private static Map<String, Function> parseFunctions(String text) {
    Map<String, Function> out = new HashMap<>();
    Matcher m = FUNC_START.matcher(text);
    int from = 0;
    while (m.find(from)) {
      if (depthAt(text, m.start()) != 0) {
        from = m.end();
        continue;
      }
      int i = m.end();
      List<String> returns = new ArrayList<>();
      String rest = text.substring(i).stripLeading();
      int consumed = text.length() - i - rest.length();
      i += consumed;
      if (m.group(1).equals("func") && rest.startsWith("(")) {
        int close = text.indexOf(')', i);
        for (Param p : params(text.substring(i + 1, close))) {
          returns.add(p.name);
        }
        i = close + 1;
      }
      Matcher name = NAME.matcher(text);
      if (!name.find(i)) {
        break;
      }
      String fname = name.group();
      i = name.end();
      int open = text.indexOf('(', i);
      int brace = text.indexOf('{', i);
      int semi = text.indexOf(';', i);
      List<Param> params = List.of();
      if (open >= 0 && (brace < 0 || open < brace) && (semi < 0 || open < semi)) {
        int close = text.indexOf(')', open);
        params = params(text.substring(open + 1, close));
        i = close + 1;
        brace = text.indexOf('{', i);
        semi = text.indexOf(';', i);
      }
      int end = params.isEmpty() ? 0 : params.get(params.size() - 1).offset + params.get(params.size() - 1).size;
      List<KernelParam> kp = new ArrayList<>();
      for (int k = 0; k < params.size(); k++) {
        Param p = params.get(k);
        kp.add(new KernelParam(k, p.name, p.offset, p.size, ParamType.BYTES));
      }
      ParamLayout layout = new ParamLayout(kp, end);
      if (brace >= 0 && (semi < 0 || brace < semi)) {
        int close = matchingBrace(text, brace);
        out.put(fname, new Function(fname, layout, params, returns, statements(text.substring(brace + 1, close))));
        from = close + 1;
      } else {
        out.putIfAbsent(fname, new Function(fname, layout, params, returns, null));
        from = Math.max(i, semi + 1);
      }
    }
    return out;
  }

  private static int depthAt(String text, int index) {
    int depth = 0;
    for (int i = 0; i < index; i++) {
      char c = text.charAt(i);
      if (c == '{') {
        depth++;
      } else if (c == '}') {
        depth--;
      }
    }
    return depth;
  }

  private static int matchingBrace(String text, int open) {
    int depth = 0;
    for (int i = open; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '{') {
        depth++;
      } else if (c == '}' && --depth == 0) {
        return i;
      }
    }
    return text.length();
  }

  /** Parameters laid out as the PTX ABI lays them out; a declaration not understood takes 8 bytes. */
  private static List<Param> params(String list) {
    List<Param> out = new ArrayList<>();
    if (list.isBlank()) {
      return out;
    }
    int offset = 0;
    for (String raw : list.split(",")) {
      String decl = raw.strip().replaceAll("\\s+", " ");
      Matcher m = PARAM.matcher(decl);
      int size = 8;
      int align = 8;
      String name = decl.substring(decl.lastIndexOf(' ') + 1);
      if (m.matches()) {
        int width = widthOf(m.group(2));
        name = m.group(4);
        if (m.group(5) != null) {
          size = Integer.parseInt(m.group(5)) * width;
          align = m.group(1) != null ? Integer.parseInt(m.group(1)) : m.group(3) != null
              ? Integer.parseInt(m.group(3)) : width;
        } else {
          size = width;
          align = m.group(1) != null ? Integer.parseInt(m.group(1)) : width;
        }
      }
      offset = (offset + align - 1) / align * align;
      out.add(new Param(name, offset, size));
      offset += size;
    }
    return out;
  }

  private static int widthOf(String scalar) {
    return switch (scalar) {
      case "u8", "s8", "b8" -> 1;
      case "u16", "s16", "b16", "f16", "bf16" -> 2;
      case "u32", "s32", "b32", "f32" -> 4;
      default -> 8;
    };
  }

  /** A body's statements, labels and predicates kept; '{' and '}' of blocks split statements, vector braces do not. */
  private static List<String> statements(String body) {
    List<String> out = new ArrayList<>();
    StringBuilder s = new StringBuilder();
    for (int i = 0; i < body.length(); i++) {
      char c = body.charAt(i);
      if (c == '{') {
        String sofar = LABEL.matcher(s.toString().strip()).replaceAll("").strip();
        if (!sofar.isEmpty() && !sofar.endsWith("=")) {
          int close = body.indexOf('}', i);
          s.append(body, i, close + 1);
          i = close;
          continue;
        }
        flush(out, s);
      } else if (c == '}' || c == ';') {
        flush(out, s);
      } else {
        s.append(c == '\n' || c == '\t' ? ' ' : c);
      }
    }
    flush(out, s);
    return out;
  }

  private static void flush(List<String> out, StringBuilder s) {
    String t = s.toString().strip();
    s.setLength(0);
    Matcher label;
    while ((label = LABEL.matcher(t)).find()) {
      t = t.substring(label.end());
    }
    if (!t.isEmpty()) {
      out.add(t);
    }
  }

  static String stripComments(String ptx) {
    StringBuilder out = new StringBuilder(ptx.length());
    int n = ptx.length();
    for (int i = 0; i < n; i++) {
      char c = ptx.charAt(i);
      if (c == '/' && i + 1 < n && ptx.charAt(i + 1) == '/') {
        while (i < n && ptx.charAt(i) != '\n') {
          i++;
        }
        out.append('\n');
      } else if (c == '/' && i + 1 < n && ptx.charAt(i + 1) == '*') {
        int end = ptx.indexOf("*/", i + 2);
        i = end < 0 ? n : end + 1;
        out.append(' ');
      } else if (c == '"') {
        int end = ptx.indexOf('"', i + 1);
        end = end < 0 ? n - 1 : end;
        out.append(ptx, i, end + 1);
        i = end;
      } else {
        out.append(c);
      }
    }
    return out.toString();
  }

  /** Splits operands at top-level commas. */
  private static List<String> operands(String s) {
    List<String> out = new ArrayList<>();
    int depth = 0;
    int start = 0;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '(' || c == '[' || c == '{') {
        depth++;
      } else if (c == ')' || c == ']' || c == '}') {
        depth--;
      } else if (c == ',' && depth == 0) {
        out.add(s.substring(start, i).strip());
        start = i + 1;
      }
    }
    String last = s.substring(start).strip();
    if (!last.isEmpty()) {
      out.add(last);
    }
    return out;
  }

  /** The names in an operand: registers, symbols, parameters ({@code {%r1, %r2}}, {@code %r|%p}, {@code -%r}). */
  private static List<String> names(String operand) {
    List<String> out = new ArrayList<>();
    Matcher m = NAME.matcher(operand);
    while (m.find()) {
      String n = m.group();
      // Special registers' components (%tid.x) and immediates' letters (0f3F80) are not names of values.
      if (m.start() > 0 && (Character.isDigit(operand.charAt(m.start() - 1)) || operand.charAt(m.start() - 1) == '.')) {
        continue;
      }
      out.add(n);
    }
    return out;
  }

  // ---- the analysis ----

  /** A function's effect in terms of its own parameter slots (origin bit {@code 1 + k} is slot {@code k}). */
  private static final class Summary {
    final int[] slotBits;
    final BitSet returns = new BitSet();
    final Set<String> notes = new LinkedHashSet<>();

    Summary(int slots) {
      slotBits = new int[slots];
    }

    static Summary conservative(Function f, String why) {
      Summary s = new Summary(slotCount(f.layout.totalSize()));
      Arrays.fill(s.slotBits, READ | WRITE);
      s.returns.set(LOADED);
      s.returns.set(1, 1 + s.slotBits.length);
      s.notes.add(why);
      return s;
    }
  }

  private static final class Analyser {

    private final Map<String, Function> functions;
    private final Map<String, Summary> done = new HashMap<>();
    private final Set<String> inProgress = new HashSet<>();

    Analyser(Map<String, Function> functions) {
      this.functions = functions;
    }

    Summary summary(Function f) {
      Summary s = done.get(f.name);
      if (s != null) {
        return s;
      }
      if (!inProgress.add(f.name)) {
        return Summary.conservative(f, "recursive call to " + f.name + " is not followed");
      }
      s = new FunctionPass(this, f).run();
      inProgress.remove(f.name);
      done.put(f.name, s);
      return s;
    }

    Function function(String name) {
      return functions.get(name);
    }
  }

  /** One function's fixpoint. */
  private static final class FunctionPass {

    private final Analyser analyser;
    private final Function f;
    private final Summary summary;
    private final Map<String, BitSet> values = new HashMap<>();
    /** Call arguments staged with st.param, by the block-local .param name; reset at its declaration. */
    private final Map<String, BitSet> staged = new HashMap<>();
    private final Set<String> predicates = new HashSet<>();
    private final List<String> predicatePrefixes = new ArrayList<>();
    private boolean changed;

    FunctionPass(Analyser analyser, Function f) {
      this.analyser = analyser;
      this.f = f;
      this.summary = new Summary(slotCount(f.layout.totalSize()));
    }

    Summary run() {
      do {
        changed = false;
        staged.clear();
        for (String s : f.body) {
          statement(s);
        }
      } while (changed);
      return summary;
    }

    private void statement(String raw) {
      String s = raw;
      if (s.startsWith(".")) {
        if (s.startsWith(".reg") && s.contains(".pred")) {
          declarePredicates(s);
        } else if (s.startsWith(".param")) {
          Matcher m = PARAM.matcher(s.replaceAll("\\s+", " "));
          if (m.matches()) {
            staged.remove(m.group(4));
          }
        }
        return;
      }
      Matcher pred = PREDICATE.matcher(s);
      if (pred.find()) {
        s = s.substring(pred.end());
      }
      int space = indexOfSpace(s);
      String opcode = space < 0 ? s : s.substring(0, space);
      String[] mods = opcode.split("\\.");
      String root = mods[0];
      List<String> ops = space < 0 ? List.of() : operands(s.substring(space + 1));
      switch (root) {
        case "ld", "ldu" -> load(mods, ops, raw);
        case "st" -> store(mods, ops, raw);
        case "atom" -> atomic(mods, ops, raw, true);
        case "red" -> atomic(mods, ops, raw, false);
        case "call" -> call(ops, raw);
        case "cp" -> copy(mods, ops, raw);
        case "prefetch", "prefetchu", "applypriority", "discard" -> {
          // No access a restore must wait for; prefetches do not fault.
        }
        default -> generic(root, ops, raw);
      }
    }

    private static int indexOfSpace(String s) {
      for (int i = 0; i < s.length(); i++) {
        if (Character.isWhitespace(s.charAt(i)) || s.charAt(i) == '(') {
          return i;
        }
      }
      return -1;
    }

    // ---- instruction kinds ----

    private void load(String[] mods, List<String> ops, String raw) {
      if (ops.size() < 2) {
        return;
      }
      String space = space(mods);
      List<String> dsts = names(ops.get(0));
      String addr = ops.get(1);
      if (space.equals("param")) {
        paramLoad(mods, dsts, addr);
        return;
      }
      BitSet origin = address(addr);
      if (space.equals("global") || space.equals("generic")) {
        access(origin, READ, raw);
      }
      if (is64BitInt(mods)) {
        BitSet loaded = new BitSet();
        loaded.set(LOADED);
        for (String d : dsts) {
          merge(d, loaded);
        }
      }
    }

    private void paramLoad(String[] mods, List<String> dsts, String addr) {
      Matcher m = ADDRESS.matcher(addr);
      String base = m.matches() ? m.group(1) : null;
      long off = m.matches() && m.group(2) != null ? Long.decode(m.group(2)) : 0;
      Param p = base == null ? null : f.param(base);
      int width = widthOf(typeOf(mods));
      for (int j = 0; j < dsts.size(); j++) {
        BitSet origin = new BitSet();
        if (p != null) {
          long from = p.offset + off + (long) j * width;
          for (long b = from / 8; b <= (from + width - 1) / 8 && b < summary.slotBits.length; b++) {
            origin.set(1 + (int) b);
          }
        } else if (base != null && staged.containsKey(base)) {
          origin.or(staged.get(base));
        } else if (base != null) {
          origin.or(value(base));
        }
        merge(dsts.get(j), origin);
      }
    }

    private void store(String[] mods, List<String> ops, String raw) {
      if (ops.size() < 2) {
        return;
      }
      String space = space(mods);
      BitSet value = new BitSet();
      for (int i = 1; i < ops.size(); i++) {
        for (String n : names(ops.get(i))) {
          value.or(value(n));
        }
      }
      if (space.equals("param")) {
        Matcher m = ADDRESS.matcher(ops.get(0));
        String base = m.matches() ? m.group(1) : null;
        if (base != null && f.returns.contains(base)) {
          if (!contains(summary.returns, value)) {
            summary.returns.or(value);
            changed = true;
          }
        } else if (base != null) {
          staged.computeIfAbsent(base, k -> new BitSet()).or(value);
        }
        return;
      }
      BitSet origin = address(ops.get(0));
      if (space.equals("global") || space.equals("generic")) {
        access(origin, WRITE, raw);
      }
      escape(mods, value, raw);
    }

    private void atomic(String[] mods, List<String> ops, String raw, boolean hasDestination) {
      int a = hasDestination ? 1 : 0;
      if (ops.size() <= a) {
        return;
      }
      String space = space(mods);
      BitSet origin = address(ops.get(a));
      if (space.equals("global") || space.equals("generic")) {
        access(origin, READ | WRITE, raw);
      }
      BitSet value = new BitSet();
      for (int i = a + 1; i < ops.size(); i++) {
        for (String n : names(ops.get(i))) {
          value.or(value(n));
        }
      }
      escape(mods, value, raw);
      if (hasDestination && is64BitInt(mods)) {
        BitSet loaded = new BitSet();
        loaded.set(LOADED);
        for (String d : names(ops.get(0))) {
          merge(d, loaded);
        }
      }
    }

    /** {@code cp.async...shared.global [dst], [src], ...}: the global source is read. */
    private void copy(String[] mods, List<String> ops, String raw) {
      List<String> addresses = new ArrayList<>();
      for (String op : ops) {
        if (op.startsWith("[")) {
          addresses.add(op);
        }
      }
      boolean globalSource = String.join(".", mods).contains("shared.global") || String.join(".", mods)
          .contains("shared::cta.global") || String.join(".", mods).contains("shared::cluster.global");
      if (globalSource && addresses.size() >= 2) {
        access(address(addresses.get(1)), READ, raw);
        return;
      }
      for (String op : addresses) {
        unknown(address(op), raw);
      }
    }

    private void call(List<String> ops, String raw) {
      // call{.uni} [(ret, ...),] target [, (arg, ...)] [, prototype]
      List<String> rets = List.of();
      int i = 0;
      if (!ops.isEmpty() && ops.get(0).startsWith("(")) {
        rets = names(ops.get(0));
        i = 1;
      }
      if (i >= ops.size()) {
        return;
      }
      String target = ops.get(i);
      List<String> args = i + 1 < ops.size() && ops.get(i + 1).startsWith("(") ? names(ops.get(i + 1)) : List.of();
      Function callee = analyser.function(target);
      BitSet result = new BitSet();
      if (target.startsWith("%") || callee == null || callee.body == null) {
        String why = target.startsWith("%") ? "indirect call through " + target
            : "call to " + target + ", which has no body in this module";
        BitSet all = new BitSet();
        for (String a : args) {
          all.or(stagedOrValue(a));
        }
        if (all.nextSetBit(1) > 0) {
          conservative(all, why + " takes parameter-derived arguments");
        }
        result.set(LOADED);
        result.or(all);
      } else {
        Summary s = analyser.summary(callee);
        for (int k = 0; k < callee.params.size() && k < args.size(); k++) {
          Param cp = callee.params.get(k);
          BitSet arg = stagedOrValue(args.get(k));
          int bits = 0;
          for (int b = cp.offset / 8; b < slotCount(cp.offset + cp.size); b++) {
            bits |= s.slotBits[b];
          }
          if (bits != 0) {
            if (arg.get(LOADED)) {
              addNote("passes a pointer loaded from memory, which no parameter names, to " + callee.name
                  + ", which accesses memory through it: " + raw);
            }
            apply(arg, bits, raw);
          }
        }
        for (String note : s.notes) {
          addNote(note);
        }
        for (int b = s.returns.nextSetBit(0); b >= 0; b = s.returns.nextSetBit(b + 1)) {
          if (b == LOADED) {
            result.set(LOADED);
            continue;
          }
          int slot = b - 1;
          for (int k = 0; k < callee.params.size() && k < args.size(); k++) {
            Param cp = callee.params.get(k);
            if (slot >= cp.offset / 8 && slot < slotCount(cp.offset + cp.size)) {
              result.or(stagedOrValue(args.get(k)));
            }
          }
        }
      }
      for (String r : rets) {
        staged.computeIfAbsent(r, k -> new BitSet()).or(result);
      }
    }

    private void generic(String root, List<String> ops, String raw) {
      BitSet sources = new BitSet();
      int first = NO_DESTINATION.contains(root) ? 0 : 1;
      for (int i = 0; i < ops.size(); i++) {
        String op = ops.get(i);
        if (op.startsWith("[")) {
          unknown(address(op), raw);
          continue;
        }
        for (String n : names(op)) {
          Param p = f.param(n);
          if (p != null) {
            // The parameter's address is taken: whatever reads it through that address is not followed.
            BitSet slots = new BitSet();
            for (int b = p.offset / 8; b < slotCount(p.offset + p.size); b++) {
              slots.set(1 + b);
            }
            conservative(slots, "the address of parameter " + n + " is taken: " + raw);
            sources.or(slots);
          } else if (i >= first && !isPredicate(n)) {
            sources.or(value(n));
          }
        }
      }
      if (first == 1 && !ops.isEmpty()) {
        for (String d : names(ops.get(0))) {
          merge(d, sources);
        }
      }
    }

    // ---- helpers ----

    /** {@code .reg .pred %p<3>} or {@code .reg .pred q, r}: a predicate selects, its bits never reach an address. */
    private void declarePredicates(String decl) {
      String list = decl.substring(decl.indexOf(".pred") + 5);
      for (String part : list.split(",")) {
        String t = part.strip();
        int lt = t.indexOf('<');
        if (lt > 0) {
          predicatePrefixes.add(t.substring(0, lt));
        } else if (!t.isEmpty()) {
          predicates.add(t);
        }
      }
    }

    private boolean isPredicate(String name) {
      if (predicates.contains(name)) {
        return true;
      }
      for (String p : predicatePrefixes) {
        if (name.length() > p.length() && name.startsWith(p) && name.substring(p.length()).chars()
            .allMatch(Character::isDigit)) {
          return true;
        }
      }
      return false;
    }

    private BitSet stagedOrValue(String name) {
      BitSet s = staged.get(name);
      return s != null ? s : value(name);
    }

    private BitSet address(String operand) {
      Matcher m = ADDRESS.matcher(operand);
      if (m.matches()) {
        return m.group(1) == null ? new BitSet() : value(m.group(1));
      }
      BitSet out = new BitSet();
      for (String n : names(operand)) {
        out.or(value(n));
      }
      return out;
    }

    private void access(BitSet origin, int bits, String raw) {
      if (origin.get(LOADED)) {
        addNote("accesses memory through a pointer loaded from memory, which no parameter names: " + raw);
      }
      apply(origin, bits, raw);
    }

    private void apply(BitSet origin, int bits, String raw) {
      for (int b = origin.nextSetBit(1); b >= 0; b = origin.nextSetBit(b + 1)) {
        int slot = b - 1;
        if ((summary.slotBits[slot] | bits) != summary.slotBits[slot]) {
          summary.slotBits[slot] |= bits;
          changed = true;
        }
      }
    }

    private void escape(String[] mods, BitSet value, String raw) {
      if (is64BitInt(mods) && value.nextSetBit(1) > 0) {
        conservative(value, "a parameter-derived pointer is stored to memory: " + raw);
      }
    }

    private void unknown(BitSet origin, String raw) {
      if (origin.nextSetBit(1) > 0) {
        conservative(origin, "cannot follow the access of '" + raw + "'");
      }
    }

    private void conservative(BitSet origin, String why) {
      apply(origin, READ | WRITE, why);
      addNote(why);
    }

    private void addNote(String note) {
      summary.notes.add(note.length() > 200 ? note.substring(0, 197) + "..." : note);
    }

    private BitSet value(String name) {
      BitSet v = values.get(name);
      return v == null ? new BitSet() : v;
    }

    private void merge(String name, BitSet origin) {
      if (origin.isEmpty()) {
        return;
      }
      BitSet v = values.computeIfAbsent(name, k -> new BitSet());
      if (!contains(v, origin)) {
        v.or(origin);
        changed = true;
      }
    }

    private static boolean contains(BitSet superset, BitSet subset) {
      BitSet extra = (BitSet) subset.clone();
      extra.andNot(superset);
      return extra.isEmpty();
    }

    private static String space(String[] mods) {
      for (int i = 1; i < mods.length; i++) {
        switch (mods[i]) {
          case "global", "shared", "local", "const", "param" -> {
            return mods[i];
          }
          default -> {
            if (mods[i].startsWith("shared::")) {
              return "shared";
            }
            if (mods[i].startsWith("param::")) {
              return "param";
            }
          }
        }
      }
      return "generic";
    }

    private static String typeOf(String[] mods) {
      for (int i = mods.length - 1; i > 0; i--) {
        if (mods[i].matches("[usbf](8|16|32|64)|bf16")) {
          return mods[i];
        }
      }
      return "b64";
    }

    private static boolean is64BitInt(String[] mods) {
      String t = typeOf(mods);
      return t.equals("u64") || t.equals("s64") || t.equals("b64");
    }
  }
}
