package dev.thaw.runtime.ptx.instrument;

import dev.thaw.runtime.ptx.PtxSyntaxException;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Directive;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Instruction;
import dev.thaw.runtime.ptx.instrument.PtxStatement.Label;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Rewrites a PTX module so that every load, store, atomic and reduction on global memory checks its address
 * range against the launch's allowed ranges before it runs, and records a violation when no range allows it.
 *
 * <h2>What is checked</h2>
 * {@code ld}, {@code ldu}, {@code st}, {@code atom}, {@code red} on the {@code .global} state space or on a
 * generic address (then only when {@code isspacep.global} holds), vector forms included, and the global
 * source of {@code cp.async.ca/cg}. The range is {@code [addr, addr + size)}, with size the vector count
 * times the type's width (for {@code cp.async}, the source size; a source size of 0, a copy that only zero-fills
 * its shared destination, reads nothing and is not checked). A predicated-off instruction is not
 * checked. {@code ldmatrix}, {@code stmatrix}, {@code mma} and {@code wgmma} touch shared memory and registers
 * only and are left as they are. Shared, local, param and const accesses are left alone, and so are accesses addressed by a
 * module variable's name ({@code [sym+8]}): they hit that variable, which is part of the module image,
 * never of an allocation. Addresses are compared as generic addresses, the form {@code CUdeviceptr}s take.
 *
 * <h2>The guard parameter</h2>
 * Every {@code .entry} gets a trailing {@code .param .u64 __thaw_guard}: the device address of a guard table
 * ({@link GuardTable} defines the layout). Every {@code .func} defined in the module gets a trailing
 * {@code .param .b64 __thaw_guard}, and every direct call to one passes the caller's guard pointer, so
 * device functions are checked with the launch's table (and concurrent launches never share state).
 *
 * <h2>Refused</h2>
 * What cannot be checked correctly is refused with an {@link InstrumentationException} naming the function,
 * line and statement: texture and surface instructions, bulk and tensor copies ({@code cp.async.bulk*},
 * {@code cp.reduce.async.bulk*}), {@code st.async}, {@code red.async}, {@code st.bulk}, {@code multimem},
 * {@code tensormap}, {@code tcgen05}, {@code discard}, {@code wmma.load/store} without a stride on global or generic
 * addresses, indirect calls (through a register, with a prototype), calls to functions whose body is not in
 * the module (other than {@code vprintf}, {@code malloc}, {@code free}, {@code __assertfail}), global or
 * generic accesses through a register narrower than 64 bits or with an address or size that is not
 * understood, {@code .address_size 32}, and input that already uses the {@code thaw_} register prefix.
 */
public final class PtxInstrumenter {

  /** The name of the trailing guard parameter of every kernel and device function. */
  public static final String GUARD_PARAM = "__thaw_guard";

  /** System calls the driver resolves; they take no guard and their own accesses are not checked. */
  static final Set<String> SYSTEM_CALLS = Set.of("vprintf", "malloc", "free", "__assertfail");

  private static final String G = "%thaw_rd0";
  private static final String A = "%thaw_rd1";
  private static final String E = "%thaw_rd2";
  private static final String N = "%thaw_rd3";
  private static final String CUR = "%thaw_rd4";
  private static final String T1 = "%thaw_rd5";
  private static final String T2 = "%thaw_rd6";
  private static final String T3 = "%thaw_rd7";
  private static final String P = "%thaw_p0";
  private static final String R = "%thaw_r0";

  private static final Pattern RESERVED = Pattern.compile("%thaw_|\\$thaw_|__thaw_");
  private static final Pattern ADDRESS = Pattern.compile(
      "^\\[\\s*([%$\\w.]+?)\\s*(?:([+-])\\s*(-?\\s*(?:0[xX][0-9a-fA-F]+|\\d+)))?\\s*\\]$");
  private static final Pattern IMMEDIATE = Pattern.compile("^-?(?:0[xX][0-9a-fA-F]+|\\d+)U?$");
  private static final Pattern REG_DECL = Pattern.compile("^\\.reg\\s+(?:\\.v\\d\\s+)?\\.(\\w+)\\s+(.+)$");
  private static final Map<String, Integer> WIDTH = new HashMap<>();

  static {
    for (String t : new String[] {"b8", "u8", "s8", "e4m3", "e5m2"}) {
      WIDTH.put(t, 1);
    }
    for (String t : new String[] {"b16", "u16", "s16", "f16", "bf16", "e4m3x2", "e5m2x2"}) {
      WIDTH.put(t, 2);
    }
    for (String t : new String[] {"b32", "u32", "s32", "f32", "f16x2", "bf16x2", "tf32"}) {
      WIDTH.put(t, 4);
    }
    for (String t : new String[] {"b64", "u64", "s64", "f64"}) {
      WIDTH.put(t, 8);
    }
    WIDTH.put("b128", 16);
  }

  private PtxInstrumenter() {}

  /**
   * Instruments {@code ptx}.
   *
   * @throws InstrumentationException for a construct it does not handle
   * @throws PtxSyntaxException if the text cannot be read
   */
  public static InstrumentedModule instrument(String ptx) {
    Matcher reserved = RESERVED.matcher(PtxModule.stripComments(ptx));
    if (reserved.find()) {
      int line = (int) ptx.substring(0, reserved.start()).chars().filter(c -> c == '\n').count() + 1;
      throw new InstrumentationException(null, line, null,
          "the module already uses Thaw's reserved prefix 'thaw_' (instrumented twice?)");
    }
    PtxModule module = PtxModule.parse(ptx);
    if (module.addressSize() != 64) {
      throw new InstrumentationException(null, 1, ".address_size " + module.addressSize(),
          "only 64-bit addressing is supported");
    }
    return new Rewrite(module).run();
  }

  private enum Space { GLOBAL, GENERIC, OTHER }

  /** One access to check: where its address is, how many bytes, what it does. */
  /**
   * One checked access: {@code [address, address + size)}, {@code size} an immediate or a 32-bit register that
   * {@code setup} (emitted just before the check's arithmetic) computes, or null.
   */
  private record Access(AccessOp kind, Space space, String address, String size, String skipWhen,
      List<PtxStatement> setup) {

    Access(AccessOp kind, Space space, String address, String size, String skipWhen) {
      this(kind, space, address, size, skipWhen, List.of());
    }
  }

  private static final Pattern WMMA_SHAPE = Pattern.compile("m(\\d+)n(\\d+)k(\\d+)");
  private static final Map<String, Integer> WMMA_ELEMENT_BYTES = Map.of("f16", 2, "bf16", 2, "tf32", 4, "f32", 4,
      "s32", 4, "f64", 8, "s8", 1, "u8", 1);

  private static final class Rewrite {
    private final PtxModule module;
    private final List<AccessSite> sites = new ArrayList<>();
    private int instructionIndex;
    private int callSequence;
    private PtxFunction function;
    private Map<String, String> regTypes;

    Rewrite(PtxModule module) {
      this.module = module;
    }

    InstrumentedModule run() {
      List<String> kernels = new ArrayList<>();
      for (PtxFunction f : module.functions()) {
        if (f.isEntry()) {
          f.params().add(".param .u64 " + GUARD_PARAM);
          if (f.hasBody()) {
            kernels.add(f.name());
          }
        } else if (module.definition(f.name()).isPresent()) {
          f.params().add(".param .b64 " + GUARD_PARAM);
        }
      }
      for (PtxFunction f : module.functions()) {
        if (f.hasBody()) {
          function = f;
          rewriteBody(f);
        }
      }
      return new InstrumentedModule(module.print(), kernels, sites);
    }

    private void rewriteBody(PtxFunction f) {
      regTypes = registerTypes(f.body());
      List<PtxStatement> out = new ArrayList<>();
      out.add(new Directive(".reg .b64 %thaw_rd<8>", true, 0));
      out.add(new Directive(".reg .pred %thaw_p<1>", true, 0));
      out.add(new Directive(".reg .b32 %thaw_r<1>", true, 0));
      out.add(ins("ld.param.u64", G, "[" + GUARD_PARAM + "]"));
      if (f.isEntry()) {
        out.add(ins("cvta.to.global.u64", G, G));
      }
      for (PtxStatement s : f.body()) {
        if (!(s instanceof Instruction i)) {
          out.add(s);
          continue;
        }
        int id = instructionIndex++;
        if (i.root().equals("call")) {
          out.addAll(rewriteCall(i));
          continue;
        }
        Access access = classify(i);
        if (access != null) {
          sites.add(new AccessSite(id, f.name(), i.line(), access.kind(), access.space() == Space.GENERIC,
              i.print()));
          emitCheck(out, id, i, access);
        }
        out.add(i);
      }
      f.body().clear();
      f.body().addAll(out);
    }

    // ---- classification ----

    private Access classify(Instruction i) {
      String root = i.root();
      List<String> mods = i.modifiers();
      switch (root) {
        case "tex", "tld4", "txq", "suld", "sust", "sured", "suq" ->
            throw refuse(i, "texture and surface instructions are not supported");
        case "multimem" -> throw refuse(i, "multimem accesses multicast objects, whose ranges are not checked");
        case "tensormap" -> throw refuse(i, "tensormap instructions modify tensor maps in memory");
        case "tcgen05" -> throw refuse(i, "tcgen05 (tensor memory) instructions are not supported");
        case "discard" -> throw refuse(i, "discard changes global memory without a store");
        case "wmma" -> {
          if ((mods.get(0).equals("load") || mods.get(0).equals("store")) && space(mods) != Space.OTHER) {
            return fragmentAccess(i, mods);
          }
          return null;
        }
        case "cp" -> {
          return classifyCopy(i, mods);
        }
        case "ld", "ldu" -> {
          return memoryAccess(i, mods, AccessOp.READ);
        }
        case "st" -> {
          if (mods.contains("async") || mods.contains("bulk")) {
            throw refuse(i, "st.async and st.bulk are not supported");
          }
          return memoryAccess(i, mods, AccessOp.WRITE);
        }
        case "red" -> {
          if (mods.contains("async")) {
            throw refuse(i, "red.async is not supported");
          }
          return memoryAccess(i, mods, AccessOp.ATOMIC);
        }
        case "atom" -> {
          return memoryAccess(i, mods, AccessOp.ATOMIC);
        }
        default -> {
          return null;
        }
      }
    }

    private Access classifyCopy(Instruction i, List<String> mods) {
      String op = i.opcode();
      if (op.startsWith("cp.async.bulk") || op.startsWith("cp.reduce.async.bulk")) {
        throw refuse(i, "bulk and tensor copies (cp.async.bulk*, TMA) are not supported");
      }
      if (!op.startsWith("cp.async.")) {
        throw refuse(i, "unknown copy instruction");
      }
      String what = mods.get(1);
      if (what.startsWith("wait_") || what.equals("commit_group") || what.equals("mbarrier")) {
        return null;
      }
      if (!(what.equals("ca") || what.equals("cg")) || !mods.contains("global")) {
        throw refuse(i, "unknown cp.async form");
      }
      List<String> ops = new ArrayList<>(i.operands());
      if (mods.stream().anyMatch(m -> m.endsWith("cache_hint"))) {
        ops.remove(ops.size() - 1);
      }
      if (ops.size() < 3 || ops.size() > 4 || !IMMEDIATE.matcher(ops.get(2)).matches()) {
        throw refuse(i, "cannot read the operands of cp.async");
      }
      String size = ops.get(2);
      String skipWhen = null;
      if (ops.size() == 4) {
        String extra = ops.get(3);
        if (IMMEDIATE.matcher(extra).matches()) {
          size = extra;
        } else if ("pred".equals(regTypes.get(extra))) {
          skipWhen = extra; // ignore-src: nothing is read when it holds
        } else if (isWidth(regTypes.get(extra), 4)) {
          size = extra;
        } else {
          throw refuse(i, "cannot tell whether '" + extra + "' is a source size or an ignore-src predicate");
        }
      }
      return new Access(AccessOp.READ, Space.GLOBAL, ops.get(1), size, skipWhen);
    }

    private Access memoryAccess(Instruction i, List<String> mods, AccessOp kind) {
      Space space = space(mods);
      if (space == Space.OTHER) {
        return null;
      }
      String address = null;
      for (String o : i.operands()) {
        if (o.startsWith("[")) {
          address = o;
          break;
        }
      }
      if (address == null) {
        throw refuse(i, "no address operand");
      }
      int width = 0;
      int vector = 1;
      for (String m : mods) {
        if (WIDTH.containsKey(m)) {
          width = WIDTH.get(m);
        } else if (m.matches("v[248]")) {
          vector = Integer.parseInt(m.substring(1));
        }
      }
      if (width == 0) {
        throw refuse(i, "cannot tell the access size");
      }
      Matcher m = ADDRESS.matcher(address);
      if (!m.matches()) {
        throw refuse(i, "cannot read the address operand " + address);
      }
      String base = m.group(1);
      if (!base.startsWith("%") && !IMMEDIATE.matcher(base).matches()) {
        return null; // a module variable by name: part of the module image, not of an allocation
      }
      return new Access(kind, space, address, Integer.toString(width * vector), null);
    }

    /**
     * A {@code wmma.load/store} on a global or generic address: the whole strided fragment is checked as one
     * range, {@code [addr, addr + ((rows - 1) * stride + cols) * elementBytes)}, rows and columns as the
     * layout stores the fragment (a is m x k, b is k x n, c and d are m x n; {@code .col} swaps them). A
     * generic fragment in shared or local memory (TF32 fragments are loaded through generic pointers) is
     * skipped like any generic access that is not global.
     */
    private Access fragmentAccess(Instruction i, List<String> mods) {
      Matcher shape = null;
      Integer elementBytes = null;
      for (String m : mods) {
        Matcher sm = WMMA_SHAPE.matcher(m);
        if (sm.matches()) {
          shape = sm;
        }
        if (WMMA_ELEMENT_BYTES.containsKey(m)) {
          elementBytes = WMMA_ELEMENT_BYTES.get(m);
        }
      }
      String matrix = mods.size() > 1 ? mods.get(1) : "";
      boolean col = mods.contains("col");
      if (shape == null || elementBytes == null || !(mods.contains("row") || col)
          || !List.of("a", "b", "c", "d").contains(matrix)) {
        throw refuse(i, "cannot tell the fragment's shape, layout or element type");
      }
      int m = Integer.parseInt(shape.group(1));
      int n = Integer.parseInt(shape.group(2));
      int k = Integer.parseInt(shape.group(3));
      int first = matrix.equals("a") ? m : matrix.equals("b") ? k : m;
      int second = matrix.equals("a") ? k : n;
      int rows = col ? second : first;
      int cols = col ? first : second;
      List<String> ops = i.operands();
      if (ops.size() != 3 || !ops.get(1).startsWith("[") && !ops.get(0).startsWith("[")) {
        throw refuse(i, "a wmma fragment access without an explicit stride is not supported");
      }
      String address = mods.get(0).equals("load") ? ops.get(1) : ops.get(0);
      String stride = ops.get(2);
      Matcher am = ADDRESS.matcher(address);
      if (!am.matches()) {
        throw refuse(i, "cannot read the address operand " + address);
      }
      AccessOp kind = mods.get(0).equals("load") ? AccessOp.READ : AccessOp.WRITE;
      Space space = space(mods);
      if (IMMEDIATE.matcher(stride).matches()) {
        long span = ((rows - 1) * parseLong(stride) + cols) * elementBytes;
        return new Access(kind, space, address, Long.toString(span), null);
      }
      String type = regTypes.get(stride);
      if (type == null || !isWidth(type, 4)) {
        throw refuse(i, "the stride " + stride + " is not a 32-bit register or an immediate");
      }
      return new Access(kind, space, address, R, null, List.of(ins("mad.lo.s32", R, stride,
          Integer.toString((rows - 1) * elementBytes), Integer.toString(cols * elementBytes))));
    }

    private static Space space(List<String> mods) {
      for (String m : mods) {
        if (m.equals("global")) {
          return Space.GLOBAL;
        }
        if (m.startsWith("shared") || m.startsWith("local") || m.startsWith("param") || m.startsWith("const")
            || m.equals("tex")) {
          return Space.OTHER;
        }
      }
      return Space.GENERIC;
    }

    // ---- emission ----

    /** The check before an access; see the class comment of {@link GuardTable} for the table it reads. */
    private void emitCheck(List<PtxStatement> out, int id, Instruction i, Access a) {
      String done = "$thaw_" + id + "_done";
      String loop = "$thaw_" + id + "_loop";
      String bad = "$thaw_" + id + "_bad";
      if (i.guard() != null) {
        String g = i.guard();
        out.add(guarded(g.startsWith("!") ? g.substring(1) : "!" + g, "bra", done));
      }
      if (a.skipWhen() != null) {
        out.add(guarded(a.skipWhen(), "bra", done));
      }
      Matcher m = ADDRESS.matcher(a.address());
      m.matches();
      String base = m.group(1);
      long offset = m.group(3) == null ? 0 : parseLong(m.group(3).replaceAll("\\s", ""));
      if ("-".equals(m.group(2))) {
        offset = -offset;
      }
      if (base.startsWith("%")) {
        String type = regTypes.get(base);
        if (type != null && !isWidth(type, 8)) {
          throw refuse(i, "the address register " + base + " is ." + type + ", not 64-bit");
        }
        out.add(offset == 0 ? ins("mov.b64", A, base) : ins("add.s64", A, base, Long.toString(offset)));
      } else {
        out.add(ins("mov.b64", A, Long.toString(parseLong(base) + offset)));
      }
      if (a.space() == Space.GLOBAL) {
        out.add(ins("cvta.global.u64", A, A));
      } else {
        out.add(ins("isspacep.global", P, A));
        out.add(guarded("!" + P, "bra", done));
      }
      out.addAll(a.setup());
      if (IMMEDIATE.matcher(a.size()).matches()) {
        out.add(ins("add.s64", E, A, Long.toString(parseLong(a.size()))));
      } else {
        // A register size of 0 (a cp.async that zero-fills its destination) reads nothing: no check.
        out.add(ins("setp.eq.u32", P, a.size(), "0"));
        out.add(guarded(P, "bra", done));
        out.add(ins("cvt.u64.u32", E, a.size()));
        out.add(ins("add.s64", E, A, E));
      }
      String k = Integer.toString(a.kind().mask());
      out.add(ins("ld.global.nc.u64", N, "[" + G + "]"));
      out.add(ins("add.s64", CUR, G, Integer.toString(GuardTable.RANGES_OFFSET)));
      out.add(ins("shl.b64", N, N, "5"));
      out.add(ins("add.s64", N, N, CUR)); // N: the end of the ranges, where the violation records start
      out.add(new Label(loop, 0));
      out.add(ins("setp.ge.u64", P, CUR, N));
      out.add(guarded(P, "bra", bad));
      out.add(ins("ld.global.nc.v2.u64", "{" + T1 + ", " + T2 + "}", "[" + CUR + "]"));
      out.add(ins("ld.global.nc.u64", T3, "[" + CUR + "+16]"));
      out.add(ins("add.s64", CUR, CUR, Integer.toString(GuardTable.RANGE_BYTES)));
      out.add(ins("setp.lt.u64", P, A, T1));
      out.add(ins("setp.gt.or.u64", P, E, T2, P));
      out.add(ins("and.b64", T3, T3, k));
      out.add(ins("setp.ne.or.u64", P, T3, k, P));
      out.add(guarded(P, "bra", loop));
      out.add(ins("bra", done));
      out.add(new Label(bad, 0));
      out.add(ins("atom.global.add.u64", T1, "[" + G + "+" + GuardTable.COUNT_OFFSET + "]", "1"));
      out.add(ins("ld.global.nc.u64", T2, "[" + G + "+" + GuardTable.MAX_OFFSET + "]"));
      out.add(ins("setp.ge.u64", P, T1, T2));
      out.add(guarded(P, "bra", done));
      out.add(ins("mad.lo.s64", T1, T1, Integer.toString(GuardTable.VIOLATION_BYTES), N));
      out.add(ins("st.global.u64", "[" + T1 + "]", A));
      out.add(ins("sub.s64", T2, E, A));
      out.add(ins("cvt.u32.u64", R, T2));
      out.add(ins("st.global.u32", "[" + T1 + "+8]", R));
      out.add(ins("mov.u32", R, Integer.toString(id)));
      out.add(ins("st.global.u32", "[" + T1 + "+12]", R));
      out.add(ins("mov.u32", R, k));
      out.add(ins("st.global.u32", "[" + T1 + "+16]", R));
      out.add(new Label(done, 0));
    }

    private List<PtxStatement> rewriteCall(Instruction i) {
      List<String> ops = i.operands();
      int t = 0;
      while (t < ops.size() && ops.get(t).startsWith("(")) {
        t++;
      }
      if (t >= ops.size()) {
        throw refuse(i, "cannot find the call target");
      }
      String target = ops.get(t);
      if (target.startsWith("%")) {
        throw refuse(i, "indirect calls (through a register) are not supported");
      }
      boolean hasArgs = ops.size() == t + 2 && ops.get(t + 1).startsWith("(");
      if (ops.size() > t + 2 || (ops.size() == t + 2 && !hasArgs)) {
        throw refuse(i, "calls with a prototype or a target list are not supported");
      }
      if (module.definition(target).isEmpty()) {
        if (SYSTEM_CALLS.contains(target)) {
          return List.of(i);
        }
        throw refuse(i, "the body of " + target + " is not in this module, so its accesses cannot be checked");
      }
      String param = "__thaw_gp" + callSequence++;
      List<String> newOps = new ArrayList<>(ops);
      if (hasArgs) {
        String args = ops.get(t + 1);
        String inner = args.substring(1, args.length() - 1).strip();
        newOps.set(t + 1, "(" + (inner.isEmpty() ? "" : inner + ", ") + param + ")");
      } else {
        newOps.add("(" + param + ")");
      }
      return List.of(new Directive(".param .b64 " + param, true, 0),
          ins("st.param.b64", "[" + param + "]", G),
          i.withOperands(newOps));
    }

    private InstrumentationException refuse(Instruction i, String reason) {
      return new InstrumentationException(function.name(), i.line(), i.print(), reason);
    }
  }

  /** Register name to type ({@code b64}, {@code pred}, ...), from every {@code .reg} of a body. */
  static Map<String, String> registerTypes(List<PtxStatement> body) {
    Map<String, String> out = new HashMap<>();
    for (PtxStatement s : body) {
      if (s instanceof Directive d) {
        Matcher m = REG_DECL.matcher(d.text());
        if (!m.matches()) {
          continue;
        }
        for (String decl : m.group(2).split(",")) {
          String name = decl.strip();
          int lt = name.indexOf('<');
          if (lt < 0) {
            out.put(name, m.group(1));
          } else {
            String prefix = name.substring(0, lt).strip();
            int count = Integer.parseInt(name.substring(lt + 1, name.indexOf('>')).strip());
            for (int k = 0; k < count; k++) {
              out.put(prefix + k, m.group(1));
            }
          }
        }
      }
    }
    return out;
  }

  private static boolean isWidth(String type, int bytes) {
    if (type == null) {
      return false;
    }
    Integer w = WIDTH.get(type);
    return w != null && w == bytes;
  }

  private static long parseLong(String s) {
    String t = s.endsWith("U") ? s.substring(0, s.length() - 1) : s;
    boolean negative = t.startsWith("-");
    String digits = negative ? t.substring(1) : t;
    long v = digits.startsWith("0x") || digits.startsWith("0X") ? Long.parseUnsignedLong(digits.substring(2), 16)
        : Long.parseLong(digits);
    return negative ? -v : v;
  }

  private static Instruction ins(String opcode, String... operands) {
    return new Instruction(null, opcode, List.of(operands), 0);
  }

  private static Instruction guarded(String guard, String opcode, String... operands) {
    return new Instruction(guard, opcode, List.of(operands), 0);
  }
}
