package dev.thaw.runtime.text;

import static dev.thaw.runtime.text.PyValues.UNDEFINED;
import static dev.thaw.runtime.text.PyValues.str;
import static dev.thaw.runtime.text.PyValues.truthy;

import dev.thaw.runtime.text.PyValues.Callable;
import dev.thaw.runtime.text.PyValues.Namespace;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Jinja's filters, tests and attribute lookup, and the methods of Python's strings and dicts that chat templates
 * call ({@code content.strip()}, {@code message.get('x')}, {@code args.items()}).
 */
final class Builtins {

  private Builtins() {}

  /** {@code obj.name}: a dict's method of that name, else its item; a namespace's attribute; a string's method. */
  static Object attribute(Object obj, String name) {
    if (obj instanceof Map<?, ?> m) {
      Callable method = dictMethod(m, name);
      if (method != null) {
        return method;
      }
      return m.containsKey(name) ? m.get(name) : UNDEFINED;
    }
    if (obj instanceof Namespace n) {
      return n.attributes.containsKey(name) ? n.attributes.get(name) : UNDEFINED;
    }
    if (obj instanceof String s) {
      Callable method = stringMethod(s, name);
      return method != null ? method : UNDEFINED;
    }
    if (obj == UNDEFINED || obj == null) {
      throw new TemplateException("'" + (obj == null ? "None" : "an undefined value") + "' has no attribute '" + name
          + "'");
    }
    return UNDEFINED;
  }

  /** {@code obj[key]}: an item first, then an attribute, as Jinja's subscript does. */
  static Object item(Object obj, Object key) {
    if (obj instanceof Map<?, ?> m) {
      if (m.containsKey(key)) {
        return m.get(key);
      }
      return key instanceof String k ? attribute(obj, k) : UNDEFINED;
    }
    if ((obj instanceof List || obj instanceof String) && (key instanceof Long || key instanceof Boolean)) {
      return PyValues.index(obj, PyValues.integer(key));
    }
    if (obj instanceof Namespace n) {
      return n.attributes.containsKey(key) ? n.attributes.get(key) : UNDEFINED;
    }
    if (obj == UNDEFINED || obj == null) {
      throw new TemplateException("'" + (obj == null ? "None" : "an undefined value") + "' has no item " +
          PyValues.repr(key));
    }
    return key instanceof String k ? attribute(obj, k) : UNDEFINED;
  }

  private static Callable dictMethod(Map<?, ?> m, String name) {
    return switch (name) {
      case "items" -> (a, k) -> PyValues.items(m);
      case "keys" -> (a, k) -> new ArrayList<Object>(m.keySet());
      case "values" -> (a, k) -> new ArrayList<Object>(m.values());
      case "get" -> (a, k) -> {
        Object key = a.isEmpty() ? UNDEFINED : a.get(0);
        return m.containsKey(key) ? m.get(key) : a.size() > 1 ? a.get(1) : null;
      };
      default -> null;
    };
  }

  private static Callable stringMethod(String s, String name) {
    return switch (name) {
      case "strip" -> (a, k) -> PyValues.strip(s, chars(a), 0);
      case "lstrip" -> (a, k) -> PyValues.strip(s, chars(a), 1);
      case "rstrip" -> (a, k) -> PyValues.strip(s, chars(a), 2);
      case "upper" -> (a, k) -> s.toUpperCase(Locale.ROOT);
      case "lower" -> (a, k) -> s.toLowerCase(Locale.ROOT);
      case "title" -> (a, k) -> title(s);
      case "capitalize" -> (a, k) -> capitalize(s);
      case "startswith" -> (a, k) -> affix(s, a, true);
      case "endswith" -> (a, k) -> affix(s, a, false);
      case "replace" -> (a, k) -> replace(s, str(a.get(0)), str(a.get(1)), a.size() > 2 ? PyValues.integer(a.get(2))
          : -1);
      case "split" -> (a, k) -> split(s, a.isEmpty() || a.get(0) == null ? null : str(a.get(0)),
          a.size() > 1 ? PyValues.integer(a.get(1)) : -1);
      case "find" -> (a, k) -> (long) s.indexOf(str(a.get(0)));
      case "count" -> (a, k) -> count(s, str(a.get(0)));
      case "join" -> (a, k) -> {
        StringBuilder b = new StringBuilder();
        List<Object> items = PyValues.iterate(a.get(0));
        for (int i = 0; i < items.size(); i++) {
          b.append(i == 0 ? "" : s).append(str(items.get(i)));
        }
        return b.toString();
      };
      case "isdigit" -> (a, k) -> !s.isEmpty() && s.chars().allMatch(Character::isDigit);
      case "isspace" -> (a, k) -> !s.isEmpty() && s.chars().allMatch(Character::isWhitespace);
      default -> null;
    };
  }

  private static String chars(List<Object> a) {
    return a.isEmpty() || a.get(0) == null ? null : str(a.get(0));
  }

  private static boolean affix(String s, List<Object> a, boolean start) {
    Object arg = a.get(0);
    List<Object> options = arg instanceof List<?> l ? new ArrayList<>(l) : List.of(arg);
    for (Object o : options) {
      if (start ? s.startsWith(str(o)) : s.endsWith(str(o))) {
        return true;
      }
    }
    return false;
  }

  private static long count(String s, String sub) {
    if (sub.isEmpty()) {
      return s.length() + 1;
    }
    long n = 0;
    for (int i = s.indexOf(sub); i >= 0; i = s.indexOf(sub, i + sub.length())) {
      n++;
    }
    return n;
  }

  private static String replace(String s, String old, String with, long count) {
    if (count < 0) {
      return s.replace(old, with);
    }
    StringBuilder b = new StringBuilder();
    int at = 0;
    for (long n = 0; n < count; n++) {
      int i = s.indexOf(old, at);
      if (i < 0 || old.isEmpty()) {
        break;
      }
      b.append(s, at, i).append(with);
      at = i + old.length();
    }
    return b.append(s.substring(at)).toString();
  }

  /** Python's {@code str.split(sep, maxsplit)}: runs of whitespace when {@code sep} is null. */
  private static List<Object> split(String s, String sep, long max) {
    List<Object> out = new ArrayList<>();
    if (sep == null) {
      String rest = PyValues.strip(s, null, 1);
      while (!rest.isEmpty()) {
        if (max >= 0 && out.size() == max) {
          out.add(PyValues.strip(rest, null, 2));
          return out;
        }
        int i = 0;
        while (i < rest.length() && !Character.isWhitespace(rest.charAt(i))) {
          i++;
        }
        out.add(rest.substring(0, i));
        rest = PyValues.strip(rest.substring(i), null, 1);
      }
      return out;
    }
    if (sep.isEmpty()) {
      throw new TemplateException("empty separator");
    }
    int at = 0;
    while (max < 0 || out.size() < max) {
      int i = s.indexOf(sep, at);
      if (i < 0) {
        break;
      }
      out.add(s.substring(at, i));
      at = i + sep.length();
    }
    out.add(s.substring(at));
    return out;
  }

  private static String title(String s) {
    StringBuilder b = new StringBuilder();
    boolean start = true;
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      b.append(start ? Character.toUpperCase(c) : Character.toLowerCase(c));
      start = !Character.isLetter(c);
    }
    return b.toString();
  }

  private static String capitalize(String s) {
    return s.isEmpty() ? s : Character.toUpperCase(s.charAt(0)) + s.substring(1).toLowerCase(Locale.ROOT);
  }

  // ---- filters ----

  static Object filter(String name, Object v, List<Object> args, Map<String, Object> kw) {
    switch (name) {
      case "trim" -> {
        return PyValues.strip(str(v), args.isEmpty() ? null : str(args.get(0)), 0);
      }
      case "length", "count" -> {
        return (long) PyValues.length(v);
      }
      case "string" -> {
        return str(v);
      }
      case "safe", "e", "escape", "forceescape" -> {
        return name.equals("safe") ? v : escape(str(v));
      }
      case "upper" -> {
        return str(v).toUpperCase(Locale.ROOT);
      }
      case "lower" -> {
        return str(v).toLowerCase(Locale.ROOT);
      }
      case "title" -> {
        return title(str(v));
      }
      case "capitalize" -> {
        return capitalize(str(v));
      }
      case "replace" -> {
        return replace(str(v), str(args.get(0)), str(args.get(1)), args.size() > 2 ? PyValues.integer(args.get(2))
            : -1);
      }
      case "tojson" -> {
        Object indent = kw.getOrDefault("indent", args.isEmpty() ? null : args.get(0));
        Object separators = kw.get("separators");
        String itemSep = null;
        String keySep = null;
        if (separators instanceof List<?> l && l.size() == 2) {
          itemSep = str(l.get(0));
          keySep = str(l.get(1));
        }
        return PyValues.json(v, indent == null ? null : (int) PyValues.integer(indent), itemSep, keySep,
            truthy(kw.get("sort_keys")));
      }
      case "join" -> {
        String sep = args.isEmpty() ? str(kw.getOrDefault("d", "")) : str(args.get(0));
        Object attr = kw.getOrDefault("attribute", args.size() > 1 ? args.get(1) : null);
        StringBuilder b = new StringBuilder();
        List<Object> items = PyValues.iterate(v);
        for (int i = 0; i < items.size(); i++) {
          Object x = attr == null ? items.get(i) : item(items.get(i), attr);
          b.append(i == 0 ? "" : sep).append(str(x));
        }
        return b.toString();
      }
      case "list" -> {
        return PyValues.iterate(v);
      }
      case "first" -> {
        List<Object> items = PyValues.iterate(v);
        return items.isEmpty() ? UNDEFINED : items.get(0);
      }
      case "last" -> {
        List<Object> items = PyValues.iterate(v);
        return items.isEmpty() ? UNDEFINED : items.get(items.size() - 1);
      }
      case "reverse" -> {
        if (v instanceof String s) {
          return new StringBuilder(s).reverse().toString();
        }
        List<Object> items = PyValues.iterate(v);
        Collections.reverse(items);
        return items;
      }
      case "default", "d" -> {
        Object fallback = args.isEmpty() ? "" : args.get(0);
        boolean bool = args.size() > 1 ? truthy(args.get(1)) : truthy(kw.get("boolean"));
        return v == UNDEFINED || (bool && !truthy(v)) ? fallback : v;
      }
      case "items" -> {
        return PyValues.items(v);
      }
      case "dictsort" -> {
        List<Object> items = PyValues.items(v);
        items.sort(Comparator.comparing(p -> str(((List<?>) p).get(0))));
        return items;
      }
      case "int" -> {
        return toInt(v, args.isEmpty() ? 0L : args.get(0));
      }
      case "float" -> {
        return toFloat(v, args.isEmpty() ? 0.0 : args.get(0));
      }
      case "abs" -> {
        return v instanceof Double d ? (Object) Math.abs(d) : (Object) Math.abs(PyValues.integer(v));
      }
      case "round" -> {
        long precision = args.isEmpty() ? 0 : PyValues.integer(args.get(0));
        double scale = Math.pow(10, precision);
        return Math.round(PyValues.number(v) * scale) / scale;
      }
      case "sum" -> {
        Object total = kw.getOrDefault("start", 0L);
        Object attr = kw.get("attribute");
        for (Object x : PyValues.iterate(v)) {
          total = Jinja.add(total, attr == null ? x : item(x, attr));
        }
        return total;
      }
      case "min", "max" -> {
        List<Object> items = PyValues.iterate(v);
        if (items.isEmpty()) {
          return UNDEFINED;
        }
        Object best = items.get(0);
        for (Object x : items) {
          int c = PyValues.compare(x, best);
          if (name.equals("min") ? c < 0 : c > 0) {
            best = x;
          }
        }
        return best;
      }
      case "unique" -> {
        List<Object> out = new ArrayList<>();
        for (Object x : PyValues.iterate(v)) {
          if (!PyValues.contains(out, x)) {
            out.add(x);
          }
        }
        return out;
      }
      case "sort" -> {
        List<Object> items = PyValues.iterate(v);
        Object attr = kw.get("attribute");
        Comparator<Object> c = (x, y) -> PyValues.compare(attr == null ? x : item(x, attr),
            attr == null ? y : item(y, attr));
        items.sort(truthy(kw.get("reverse")) ? c.reversed() : c);
        return items;
      }
      case "map" -> {
        List<Object> out = new ArrayList<>();
        Object attr = kw.get("attribute");
        for (Object x : PyValues.iterate(v)) {
          if (attr != null) {
            Object got = item(x, attr);
            out.add(got == UNDEFINED && kw.containsKey("default") ? kw.get("default") : got);
          } else {
            out.add(filter(str(args.get(0)), x, args.subList(1, args.size()), Map.of()));
          }
        }
        return out;
      }
      case "select", "reject", "selectattr", "rejectattr" -> {
        boolean byAttr = name.endsWith("attr");
        boolean keep = name.startsWith("select");
        List<Object> out = new ArrayList<>();
        int testAt = byAttr ? 1 : 0;
        for (Object x : PyValues.iterate(v)) {
          Object subject = byAttr ? item(x, args.get(0)) : x;
          boolean r = args.size() > testAt ? test(str(args.get(testAt)), subject, args.subList(testAt + 1,
              args.size())) : truthy(subject);
          if (r == keep) {
            out.add(x);
          }
        }
        return out;
      }
      case "indent" -> {
        long width = args.isEmpty() ? 4 : PyValues.integer(args.get(0));
        boolean first = args.size() > 1 ? truthy(args.get(1)) : truthy(kw.get("first"));
        String pad = " ".repeat((int) width);
        String text = str(v).replace("\n", "\n" + pad);
        return first ? pad + text : text;
      }
      case "batch", "slice", "wordcount", "truncate", "center", "format", "xmlattr", "urlize", "wordwrap",
          "filesizeformat", "pprint", "random", "striptags", "urlencode", "groupby", "attr" ->
          throw new TemplateException("the filter '" + name + "' is not supported by this template engine");
      default -> throw new TemplateException("no filter named '" + name + "'");
    }
  }

  private static String escape(String s) {
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&#34;")
        .replace("'", "&#39;");
  }

  private static Object toInt(Object v, Object fallback) {
    try {
      if (v instanceof Double d) {
        return (long) (double) d;
      }
      if (v instanceof Long || v instanceof Boolean) {
        return PyValues.integer(v);
      }
      return Long.parseLong(str(v).strip());
    } catch (NumberFormatException e) {
      return fallback;
    }
  }

  private static Object toFloat(Object v, Object fallback) {
    try {
      return PyValues.isNumber(v) ? PyValues.number(v) : Double.parseDouble(str(v).strip());
    } catch (NumberFormatException e) {
      return fallback;
    }
  }

  // ---- tests ----

  static boolean test(String name, Object v, List<Object> args) {
    return switch (name) {
      case "defined" -> v != UNDEFINED;
      case "undefined" -> v == UNDEFINED;
      case "none" -> v == null;
      case "boolean" -> v instanceof Boolean;
      case "true" -> Boolean.TRUE.equals(v);
      case "false" -> Boolean.FALSE.equals(v);
      case "number" -> v instanceof Long || v instanceof Double;
      case "integer" -> v instanceof Long;
      case "float" -> v instanceof Double;
      case "string" -> v instanceof String;
      case "mapping" -> v instanceof Map || v instanceof Namespace;
      case "sequence" -> v instanceof List || v instanceof String || v instanceof Map;
      case "iterable" -> v instanceof List || v instanceof String || v instanceof Map;
      case "callable" -> v instanceof Callable;
      case "odd" -> PyValues.integer(v) % 2 != 0;
      case "even" -> PyValues.integer(v) % 2 == 0;
      case "divisibleby" -> PyValues.integer(v) % PyValues.integer(args.get(0)) == 0;
      case "eq", "equalto", "==" -> PyValues.equal(v, args.get(0));
      case "ne", "!=" -> !PyValues.equal(v, args.get(0));
      case "lt", "lessthan", "<" -> PyValues.compare(v, args.get(0)) < 0;
      case "gt", "greaterthan", ">" -> PyValues.compare(v, args.get(0)) > 0;
      case "le", "<=" -> PyValues.compare(v, args.get(0)) <= 0;
      case "ge", ">=" -> PyValues.compare(v, args.get(0)) >= 0;
      case "in" -> PyValues.contains(args.get(0), v);
      case "sameas" -> v == args.get(0) || (v instanceof Boolean && v.equals(args.get(0)));
      case "lower" -> v instanceof String s && s.equals(s.toLowerCase(Locale.ROOT));
      case "upper" -> v instanceof String s && s.equals(s.toUpperCase(Locale.ROOT));
      default -> throw new TemplateException("no test named '" + name + "'");
    };
  }

  // ---- globals ----

  /** {@code range}, {@code namespace}, {@code dict}, and Hugging Face's {@code raise_exception}, {@code strftime_now}. */
  static Map<String, Object> globals() {
    Map<String, Object> g = new LinkedHashMap<>();
    g.put("range", (Callable) (a, k) -> {
      long start = a.size() > 1 ? PyValues.integer(a.get(0)) : 0;
      long stop = PyValues.integer(a.size() > 1 ? a.get(1) : a.get(0));
      long step = a.size() > 2 ? PyValues.integer(a.get(2)) : 1;
      if (step == 0) {
        throw new TemplateException("range() step must not be zero");
      }
      List<Object> out = new ArrayList<>();
      for (long i = start; step > 0 ? i < stop : i > stop; i += step) {
        out.add(i);
      }
      return out;
    });
    g.put("namespace", (Callable) (a, k) -> {
      Namespace n = new Namespace();
      for (Object m : a) {
        if (m instanceof Map<?, ?> map) {
          map.forEach((key, value) -> n.attributes.put(str(key), value));
        }
      }
      n.attributes.putAll(k);
      return n;
    });
    g.put("dict", (Callable) (a, k) -> new LinkedHashMap<String, Object>(k));
    g.put("raise_exception", (Callable) (a, k) -> {
      throw new TemplateException(a.isEmpty() ? "the chat template refused the conversation" : str(a.get(0)), true);
    });
    g.put("strftime_now", (Callable) (a, k) -> Strftime.format(str(a.get(0)), LocalDateTime.now()));
    return g;
  }
}
