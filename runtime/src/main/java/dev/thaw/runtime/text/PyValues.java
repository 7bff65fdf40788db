package dev.thaw.runtime.text;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Values inside a template, with Python's meaning (Jinja runs on Python objects): {@code null} is None, text is
 * {@link String}, integers {@link Long}, floats {@link Double}, lists {@link List}, dicts {@link Map} (insertion
 * ordered), plus {@link #UNDEFINED}, {@link Namespace} and {@link Callable}. Rendering is {@code str()}; equality,
 * order, truth and arithmetic follow Python's rules for these types.
 */
final class PyValues {

  private PyValues() {}

  /** Jinja's default Undefined: renders empty, is false, equal only to itself; using it in arithmetic fails. */
  static final Object UNDEFINED = new Object() {
    @Override
    public String toString() {
      return "Undefined";
    }
  };

  /** A function of positional and keyword arguments. */
  @FunctionalInterface
  interface Callable {
    Object call(List<Object> args, Map<String, Object> kwargs);
  }

  /** {@code namespace(...)}: the one object a template may change, attribute by attribute. */
  static final class Namespace {
    final Map<String, Object> attributes = new LinkedHashMap<>();
  }

  static boolean truthy(Object v) {
    if (v == null || v == UNDEFINED) {
      return false;
    }
    if (v instanceof Boolean b) {
      return b;
    }
    if (v instanceof Long l) {
      return l != 0;
    }
    if (v instanceof Double d) {
      return d != 0;
    }
    if (v instanceof String s) {
      return !s.isEmpty();
    }
    if (v instanceof List<?> l) {
      return !l.isEmpty();
    }
    if (v instanceof Map<?, ?> m) {
      return !m.isEmpty();
    }
    return true;
  }

  /** Python's {@code str()}; Undefined is empty. */
  static String str(Object v) {
    if (v == UNDEFINED) {
      return "";
    }
    if (v instanceof String s) {
      return s;
    }
    return repr(v);
  }

  /** Python's {@code repr()}. */
  static String repr(Object v) {
    if (v == null) {
      return "None";
    }
    if (v == UNDEFINED) {
      return "";
    }
    if (v instanceof Boolean b) {
      return b ? "True" : "False";
    }
    if (v instanceof Long l) {
      return l.toString();
    }
    if (v instanceof Double d) {
      return floatRepr(d);
    }
    if (v instanceof String s) {
      return stringRepr(s);
    }
    if (v instanceof List<?> l) {
      StringBuilder b = new StringBuilder("[");
      for (int i = 0; i < l.size(); i++) {
        b.append(i == 0 ? "" : ", ").append(repr(l.get(i)));
      }
      return b.append(']').toString();
    }
    if (v instanceof Map<?, ?> m) {
      StringBuilder b = new StringBuilder("{");
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        b.append(first ? "" : ", ").append(repr(e.getKey())).append(": ").append(repr(e.getValue()));
        first = false;
      }
      return b.append('}').toString();
    }
    if (v instanceof Namespace) {
      return "<Namespace>";
    }
    return String.valueOf(v);
  }

  /** Python's shortest round-tripping float form: {@code 1.0}, {@code 0.1}, {@code 1e-05}, {@code 1e+16}. */
  static String floatRepr(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0) {
      return 1 / d < 0 ? "-0.0" : "0.0";
    }
    BigDecimal bd = new BigDecimal(Double.toString(Math.abs(d))).stripTrailingZeros();
    String digits = bd.unscaledValue().toString();
    int exp = digits.length() - 1 - bd.scale();
    String sign = d < 0 ? "-" : "";
    if (exp < -4 || exp >= 16) {
      return sign + digits.charAt(0) + (digits.length() > 1 ? "." + digits.substring(1) : "") + "e"
          + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }
    if (exp < 0) {
      return sign + "0." + "0".repeat(-exp - 1) + digits;
    }
    if (digits.length() <= exp + 1) {
      return sign + digits + "0".repeat(exp + 1 - digits.length()) + ".0";
    }
    return sign + digits.substring(0, exp + 1) + "." + digits.substring(exp + 1);
  }

  static String stringRepr(String s) {
    char quote = s.contains("'") && !s.contains("\"") ? '"' : '\'';
    StringBuilder b = new StringBuilder().append(quote);
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (c == quote) {
            b.append('\\').append(c);
          } else if (c < 0x20 || c == 0x7f) {
            b.append(String.format(Locale.ROOT, "\\x%02x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append(quote).toString();
  }

  /**
   * {@code json.dumps(v, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sortKeys)}, as Hugging
   * Face's {@code tojson} filter calls it.
   */
  static String json(Object v, Integer indent, String itemSep, String keySep, boolean sortKeys) {
    StringBuilder b = new StringBuilder();
    String items = itemSep != null ? itemSep : indent != null ? "," : ", ";
    String keys = keySep != null ? keySep : ": ";
    json(b, v, indent, items, keys, sortKeys, 0);
    return b.toString();
  }

  private static void json(StringBuilder b, Object v, Integer indent, String items, String keys, boolean sort,
      int depth) {
    if (v == null || v == UNDEFINED) {
      b.append("null");
    } else if (v instanceof Boolean x) {
      b.append(x ? "true" : "false");
    } else if (v instanceof Long x) {
      b.append(x);
    } else if (v instanceof Double x) {
      b.append(Double.isNaN(x) ? "NaN" : Double.isInfinite(x) ? (x > 0 ? "Infinity" : "-Infinity") : floatRepr(x));
    } else if (v instanceof String s) {
      jsonString(b, s);
    } else if (v instanceof List<?> l) {
      if (l.isEmpty()) {
        b.append("[]");
        return;
      }
      b.append('[');
      for (int i = 0; i < l.size(); i++) {
        if (i > 0) {
          b.append(items);
        }
        newline(b, indent, depth + 1);
        json(b, l.get(i), indent, items, keys, sort, depth + 1);
      }
      newline(b, indent, depth);
      b.append(']');
    } else if (v instanceof Map<?, ?> m) {
      if (m.isEmpty()) {
        b.append("{}");
        return;
      }
      List<Map.Entry<?, ?>> entries = new ArrayList<>(m.entrySet());
      if (sort) {
        entries.sort((x, y) -> String.valueOf(x.getKey()).compareTo(String.valueOf(y.getKey())));
      }
      b.append('{');
      for (int i = 0; i < entries.size(); i++) {
        if (i > 0) {
          b.append(items);
        }
        newline(b, indent, depth + 1);
        jsonString(b, String.valueOf(entries.get(i).getKey()));
        b.append(keys);
        json(b, entries.get(i).getValue(), indent, items, keys, sort, depth + 1);
      }
      newline(b, indent, depth);
      b.append('}');
    } else if (v instanceof Namespace n) {
      json(b, n.attributes, indent, items, keys, sort, depth);
    } else {
      throw new TemplateException("tojson: a " + typeName(v) + " is not JSON");
    }
  }

  private static void newline(StringBuilder b, Integer indent, int depth) {
    if (indent != null) {
      b.append('\n').append(" ".repeat(indent * depth));
    }
  }

  private static void jsonString(StringBuilder b, String s) {
    b.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        case '\b' -> b.append("\\b");
        case '\f' -> b.append("\\f");
        default -> {
          if (c < 0x20) {
            b.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    b.append('"');
  }

  static String typeName(Object v) {
    if (v == null) {
      return "NoneType";
    }
    if (v == UNDEFINED) {
      return "Undefined";
    }
    if (v instanceof Boolean) {
      return "bool";
    }
    if (v instanceof Long) {
      return "int";
    }
    if (v instanceof Double) {
      return "float";
    }
    if (v instanceof String) {
      return "str";
    }
    if (v instanceof List) {
      return "list";
    }
    if (v instanceof Map) {
      return "dict";
    }
    return v.getClass().getSimpleName();
  }

  static boolean isNumber(Object v) {
    return v instanceof Long || v instanceof Double || v instanceof Boolean;
  }

  static double number(Object v) {
    if (v instanceof Long l) {
      return l;
    }
    if (v instanceof Double d) {
      return d;
    }
    if (v instanceof Boolean b) {
      return b ? 1 : 0;
    }
    throw new TemplateException("expected a number, not a " + typeName(v));
  }

  static long integer(Object v) {
    if (v instanceof Long l) {
      return l;
    }
    if (v instanceof Boolean b) {
      return b ? 1 : 0;
    }
    throw new TemplateException("expected an integer, not a " + typeName(v));
  }

  /** Python's {@code ==}. */
  static boolean equal(Object a, Object b) {
    if (a == b) {
      return true;
    }
    if (a == null || b == null || a == UNDEFINED || b == UNDEFINED) {
      return false;
    }
    if (isNumber(a) && isNumber(b)) {
      return number(a) == number(b);
    }
    if (a instanceof List<?> x && b instanceof List<?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (int i = 0; i < x.size(); i++) {
        if (!equal(x.get(i), y.get(i))) {
          return false;
        }
      }
      return true;
    }
    if (a instanceof Map<?, ?> x && b instanceof Map<?, ?> y) {
      if (x.size() != y.size()) {
        return false;
      }
      for (Map.Entry<?, ?> e : x.entrySet()) {
        if (!y.containsKey(e.getKey()) || !equal(e.getValue(), y.get(e.getKey()))) {
          return false;
        }
      }
      return true;
    }
    return a.equals(b);
  }

  /** Python's ordering of numbers, strings and lists; anything else fails as Python's would. */
  static int compare(Object a, Object b) {
    if (isNumber(a) && isNumber(b)) {
      return Double.compare(number(a), number(b));
    }
    if (a instanceof String x && b instanceof String y) {
      return Integer.signum(x.compareTo(y));
    }
    if (a instanceof List<?> x && b instanceof List<?> y) {
      for (int i = 0; i < Math.min(x.size(), y.size()); i++) {
        int c = compare(x.get(i), y.get(i));
        if (c != 0) {
          return c;
        }
      }
      return Integer.compare(x.size(), y.size());
    }
    throw new TemplateException("'<' is not supported between a " + typeName(a) + " and a " + typeName(b));
  }

  /** Python's {@code in}. */
  static boolean contains(Object container, Object item) {
    if (container instanceof String s) {
      if (!(item instanceof String i)) {
        throw new TemplateException("'in <string>' needs a string on the left, not a " + typeName(item));
      }
      return s.contains(i);
    }
    if (container instanceof List<?> l) {
      for (Object o : l) {
        if (equal(o, item)) {
          return true;
        }
      }
      return false;
    }
    if (container instanceof Map<?, ?> m) {
      return m.containsKey(item);
    }
    if (container instanceof Namespace n) {
      return n.attributes.containsKey(item);
    }
    if (container == UNDEFINED) {
      throw new TemplateException("'in' on an undefined value");
    }
    throw new TemplateException("a " + typeName(container) + " is not a container");
  }

  /** The items {@code for} walks: a list's elements, a dict's keys, a string's characters. */
  static List<Object> iterate(Object v) {
    if (v instanceof List<?> l) {
      return new ArrayList<>(l);
    }
    if (v instanceof Map<?, ?> m) {
      return new ArrayList<>(m.keySet());
    }
    if (v instanceof String s) {
      List<Object> out = new ArrayList<>();
      s.codePoints().forEach(c -> out.add(new String(Character.toChars(c))));
      return out;
    }
    if (v == UNDEFINED || v == null) {
      if (v == null) {
        throw new TemplateException("'NoneType' object is not iterable");
      }
      return new ArrayList<>();
    }
    throw new TemplateException("a " + typeName(v) + " is not iterable");
  }

  static int length(Object v) {
    if (v instanceof String s) {
      return s.codePointCount(0, s.length());
    }
    if (v instanceof List<?> l) {
      return l.size();
    }
    if (v instanceof Map<?, ?> m) {
      return m.size();
    }
    if (v == UNDEFINED) {
      return 0;
    }
    throw new TemplateException("a " + typeName(v) + " has no length");
  }

  /** A dict's items as [key, value] pairs. */
  static List<Object> items(Object v) {
    if (!(v instanceof Map<?, ?> m)) {
      if (v == UNDEFINED) {
        return new ArrayList<>();
      }
      throw new TemplateException("items() of a " + typeName(v));
    }
    List<Object> out = new ArrayList<>();
    for (Map.Entry<?, ?> e : m.entrySet()) {
      List<Object> pair = new ArrayList<>(2);
      pair.add(e.getKey());
      pair.add(e.getValue());
      out.add(pair);
    }
    return out;
  }

  /** Python's {@code str.strip(chars)} family: {@code which} 0 both ends, 1 left, 2 right. */
  static String strip(String s, String chars, int which) {
    int start = 0;
    int end = s.length();
    if (which != 2) {
      while (start < end && stripped(s.charAt(start), chars)) {
        start++;
      }
    }
    if (which != 1) {
      while (end > start && stripped(s.charAt(end - 1), chars)) {
        end--;
      }
    }
    return s.substring(start, end);
  }

  private static boolean stripped(char c, String chars) {
    return chars == null ? Character.isWhitespace(c) || Character.isSpaceChar(c) : chars.indexOf(c) >= 0;
  }

  /** A list's or string's element at a Python index (negative counts from the end); Undefined beyond. */
  static Object index(Object v, long i) {
    if (v instanceof List<?> l) {
      long at = i < 0 ? l.size() + i : i;
      return at >= 0 && at < l.size() ? l.get((int) at) : UNDEFINED;
    }
    if (v instanceof String s) {
      int[] cps = s.codePoints().toArray();
      long at = i < 0 ? cps.length + i : i;
      return at >= 0 && at < cps.length ? new String(cps, (int) at, 1) : UNDEFINED;
    }
    return UNDEFINED;
  }

  /** Python's slice {@code v[start:stop:step]} of a list or string; null bounds are open. */
  static Object slice(Object v, Long start, Long stop, Long step) {
    long st = step == null ? 1 : step;
    if (st == 0) {
      throw new TemplateException("slice step cannot be zero");
    }
    List<Object> items;
    boolean string = v instanceof String;
    if (v instanceof List<?> l) {
      items = new ArrayList<>(l);
    } else if (v instanceof String s) {
      items = iterate(s);
    } else {
      throw new TemplateException("a " + typeName(v) + " cannot be sliced");
    }
    int n = items.size();
    long lo;
    long hi;
    if (st > 0) {
      lo = start == null ? 0 : clamp(start < 0 ? start + n : start, 0, n);
      hi = stop == null ? n : clamp(stop < 0 ? stop + n : stop, 0, n);
    } else {
      lo = start == null ? n - 1 : clamp(start < 0 ? start + n : start, -1, n - 1);
      hi = stop == null ? -1 : clamp(stop < 0 ? stop + n : stop, -1, n - 1);
    }
    List<Object> out = new ArrayList<>();
    for (long i = lo; st > 0 ? i < hi : i > hi; i += st) {
      out.add(items.get((int) i));
    }
    if (string) {
      StringBuilder b = new StringBuilder();
      out.forEach(b::append);
      return b.toString();
    }
    return out;
  }

  private static long clamp(long v, long lo, long hi) {
    return Math.max(lo, Math.min(hi, v));
  }

  /** Turns JSON-like Java values (records of a request) into template values: ints as Long, floats as Double. */
  static Object of(Object v) {
    if (v instanceof Integer i) {
      return (long) i;
    }
    if (v instanceof Float f) {
      return (double) f;
    }
    if (v instanceof Map<?, ?> m) {
      Map<String, Object> out = new LinkedHashMap<>();
      for (Map.Entry<?, ?> e : m.entrySet()) {
        out.put(String.valueOf(e.getKey()), of(e.getValue()));
      }
      return out;
    }
    if (v instanceof List<?> l) {
      List<Object> out = new ArrayList<>();
      for (Iterator<?> it = l.iterator(); it.hasNext(); ) {
        out.add(of(it.next()));
      }
      return out;
    }
    return v;
  }
}
