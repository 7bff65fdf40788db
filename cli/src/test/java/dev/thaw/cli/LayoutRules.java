package dev.thaw.cli;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The house's arrows as written down, and what breaks them. The module rules are the list under "Modules" in
 * {@code README.md} ({@code - `a`, `b` → `c`, `d`}, {@code → nothing}, {@code → anything}); the room rules are the
 * table under "Rooms" in {@code docs/design/layout.md} (columns {@code room}, {@code packages}, {@code may import}).
 * A source file is its module, its package and the packages of its {@code dev.thaw} imports; a package is read from
 * an import as the segments before the first capitalised one.
 */
final class LayoutRules {

  static final String PREFIX = "dev.thaw.";
  private static final Pattern BACKTICKED = Pattern.compile("`([^`]+)`");
  private static final Pattern IMPORT =
      Pattern.compile("(?m)^import\\s+(?:static\\s+)?(dev\\.thaw\\.[\\w.]+?)(?:\\.\\*)?;");
  private static final Pattern PACKAGE = Pattern.compile("(?m)^package\\s+([\\w.]+);");
  /** A fully qualified type in code: a package of lowercase segments under a common root, then a capitalised name. */
  private static final Pattern INLINE_TYPE =
      Pattern.compile("(?<![\\w.$])((?:java|javax|jdk|sun|com|org|io|net|dev)(?:\\.[a-z_]\\w*)+\\.[A-Z]\\w*)");

  /** One main source file: where it is and what it imports. */
  record Source(String module, String file, String pkg, Set<String> importedPackages, List<String> inlineTypes) {}

  /** A room: its name, its packages ({@code x} exactly, {@code x.*} for x and everything below) and its arrows. */
  record Room(String name, List<String> packages, Set<String> mayImport, boolean mayImportAny,
      Set<String> constructs) {}

  private final Map<String, Set<String>> moduleArrows;
  private final Set<String> modulesToAnything;
  private final Map<String, Room> rooms;

  LayoutRules(Map<String, Set<String>> moduleArrows, Set<String> modulesToAnything, Map<String, Room> rooms) {
    this.moduleArrows = moduleArrows;
    this.modulesToAnything = modulesToAnything;
    this.rooms = rooms;
  }

  static LayoutRules read(Path readme, Path layout) {
    return new LayoutRules(moduleArrows(read(readme)), modulesToAnything(read(readme)), rooms(read(layout)));
  }

  Map<String, Room> rooms() {
    return rooms;
  }

  private static String read(Path file) {
    try {
      return Files.readString(file);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The lines of the section {@code heading} starts ({@code ## heading}), up to the next heading of its level. */
  static List<String> section(String markdown, String heading) {
    List<String> out = new ArrayList<>();
    boolean in = false;
    for (String line : markdown.split("\n")) {
      if (line.startsWith("## ")) {
        if (in) {
          break;
        }
        in = line.substring(3).strip().equals(heading);
        continue;
      }
      if (in) {
        out.add(line);
      }
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("no section '## " + heading + "'");
    }
    return out;
  }

  private static List<String> backticked(String text) {
    List<String> out = new ArrayList<>();
    Matcher m = BACKTICKED.matcher(text);
    while (m.find()) {
      out.add(m.group(1));
    }
    return out;
  }

  /** {@code - `a`, `b` → `c`, `d`} lines; {@code → nothing} gives an empty set; {@code → anything} none. */
  static Map<String, Set<String>> moduleArrows(String readme) {
    Map<String, Set<String>> out = new TreeMap<>();
    for (String line : section(readme, "Modules")) {
      if (!line.startsWith("- `") || !line.contains("→")) {
        continue;
      }
      String[] sides = line.split("→", 2);
      String right = sides[1].strip();
      if (right.startsWith("anything")) {
        continue;
      }
      String targets = right.startsWith("nothing") ? "" : right.split("[;.]", 2)[0];
      for (String from : backticked(sides[0])) {
        out.put(from, new TreeSet<>(backticked(targets)));
      }
    }
    if (out.isEmpty()) {
      throw new IllegalArgumentException("README's 'Modules' section lists no arrows");
    }
    return out;
  }

  static Set<String> modulesToAnything(String readme) {
    Set<String> out = new TreeSet<>();
    for (String line : section(readme, "Modules")) {
      if (line.startsWith("- `") && line.contains("→") && line.split("→", 2)[1].strip().startsWith("anything")) {
        out.addAll(backticked(line.split("→", 2)[0]));
      }
    }
    return out;
  }

  /** The rows of the table under "Rooms". */
  static Map<String, Room> rooms(String layout) {
    List<String> rows = section(layout, "Rooms").stream().filter(l -> l.startsWith("|")).toList();
    if (rows.size() < 3) {
      throw new IllegalArgumentException("layout.md's 'Rooms' section has no table");
    }
    List<String> header = cells(rows.get(0));
    int room = header.indexOf("room");
    int packages = header.indexOf("packages");
    int mayImport = header.indexOf("may import");
    if (room < 0 || packages < 0 || mayImport < 0) {
      throw new IllegalArgumentException("the rooms table needs the columns room, packages and may import: " + header);
    }
    Map<String, Room> out = new LinkedHashMap<>();
    for (String row : rows.subList(2, rows.size())) {
      List<String> c = cells(row);
      String name = backticked(c.get(room)).get(0);
      String arrows = c.get(mayImport);
      boolean any = arrows.startsWith("any");
      Set<String> allowed = new TreeSet<>();
      Set<String> constructs = new TreeSet<>();
      Set<String> except = new TreeSet<>();
      String listed = any && arrows.contains(" but ") ? arrows.substring(arrows.indexOf(" but ")) : any ? "" : arrows;
      for (String part : listed.split(",")) {
        for (String target : backticked(part)) {
          (any ? except : allowed).add(target);
          if (part.contains("(constructs)")) {
            constructs.add(target);
          }
        }
      }
      List<String> pkgs = backticked(c.get(packages));
      if (out.put(name, new Room(name, pkgs, any ? except : allowed, any, constructs)) != null) {
        throw new IllegalArgumentException("room '" + name + "' is listed twice");
      }
    }
    return out;
  }

  private static List<String> cells(String row) {
    String inner = row.strip();
    inner = inner.substring(1, inner.endsWith("|") ? inner.length() - 1 : inner.length());
    List<String> out = new ArrayList<>();
    for (String c : inner.split("\\|")) {
      out.add(c.strip());
    }
    return out;
  }

  /** Every main source file of the modules under {@code root} ({@code <module>/src/main/java}). */
  static List<Source> sources(Path root) {
    List<Source> out = new ArrayList<>();
    try (Stream<Path> modules = Files.list(root)) {
      for (Path module : modules.sorted().toList()) {
        Path main = module.resolve("src/main/java");
        if (!Files.isDirectory(main)) {
          continue;
        }
        try (Stream<Path> files = Files.walk(main)) {
          for (Path f : files.filter(p -> p.toString().endsWith(".java")).sorted().toList()) {
            out.add(source(module.getFileName().toString(), root.relativize(f).toString(), Files.readString(f)));
          }
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return out;
  }

  static Source source(String module, String file, String text) {
    Matcher p = PACKAGE.matcher(text);
    String pkg = p.find() ? p.group(1) : "";
    Set<String> imported = new TreeSet<>();
    Matcher m = IMPORT.matcher(text);
    while (m.find()) {
      imported.add(packageOf(m.group(1)));
    }
    imported.remove(pkg);
    List<String> inline = new ArrayList<>();
    Matcher t = INLINE_TYPE.matcher(code(text));
    while (t.find()) {
      inline.add(t.group(1));
    }
    return new Source(module, file, pkg, imported, inline);
  }

  /** The package of an imported name: its segments up to the first capitalised one. */
  static String packageOf(String name) {
    List<String> segments = new ArrayList<>();
    for (String s : name.split("\\.")) {
      if (Character.isUpperCase(s.charAt(0))) {
        break;
      }
      segments.add(s);
    }
    return String.join(".", segments);
  }

  /** The text's code: package and import lines, comments, string and character literals blanked. */
  static String code(String text) {
    StringBuilder out = new StringBuilder(text.length());
    int i = 0;
    int n = text.length();
    while (i < n) {
      if (text.startsWith("\"\"\"", i)) {
        int end = text.indexOf("\"\"\"", i + 3);
        i = end < 0 ? n : end + 3;
        out.append("\"\"");
      } else if (text.charAt(i) == '"' || text.charAt(i) == '\'') {
        char quote = text.charAt(i);
        int j = i + 1;
        while (j < n && text.charAt(j) != quote) {
          j += text.charAt(j) == '\\' ? 2 : 1;
        }
        i = j + 1;
        out.append(quote).append(quote);
      } else if (text.startsWith("//", i)) {
        int end = text.indexOf('\n', i);
        i = end < 0 ? n : end;
      } else if (text.startsWith("/*", i)) {
        int end = text.indexOf("*/", i + 2);
        i = end < 0 ? n : end + 2;
        out.append(' ');
      } else {
        out.append(text.charAt(i++));
      }
    }
    return out.toString().replaceAll("(?m)^(package|import)\\s[^\n]*$", "");
  }

  /** The room {@code pkg} is in: a room naming it exactly, else the one whose {@code x.*} is the longest match. */
  String roomOf(String pkg) {
    String rel = pkg.startsWith(PREFIX) ? pkg.substring(PREFIX.length()) : pkg;
    String best = null;
    int bestLength = -1;
    for (Room r : rooms.values()) {
      for (String p : r.packages()) {
        if (p.equals(rel)) {
          return r.name();
        }
        if (p.endsWith(".*")) {
          String base = p.substring(0, p.length() - 2);
          if ((rel.equals(base) || rel.startsWith(base + ".")) && base.length() > bestLength) {
            best = r.name();
            bestLength = base.length();
          }
        }
      }
    }
    return best;
  }

  /** What in {@code sources} breaks the rules, one line each; empty when nothing does. */
  List<String> violations(List<Source> sources) {
    List<String> out = new ArrayList<>();
    Map<String, String> moduleOf = new HashMap<>();
    for (Source s : sources) {
      moduleOf.put(s.pkg(), s.module());
    }
    Map<String, Set<String>> moduleArrowsUsed = new TreeMap<>();
    Map<String, Set<String>> packageArrows = new TreeMap<>();
    for (Source s : sources) {
      String from = roomOf(s.pkg());
      if (from == null) {
        out.add(s.file() + ": package " + s.pkg() + " is in no room of docs/design/layout.md");
        continue;
      }
      for (String inline : s.inlineTypes()) {
        out.add(s.file() + ": names " + inline + " inline; import it");
      }
      for (String target : s.importedPackages()) {
        String toModule = moduleOf.get(target);
        if (toModule == null) {
          out.add(s.file() + ": imports from " + target + ", which no main source declares");
          continue;
        }
        packageArrows.computeIfAbsent(s.pkg(), k -> new TreeSet<>()).add(target);
        if (!toModule.equals(s.module())) {
          moduleArrowsUsed.computeIfAbsent(s.module(), k -> new TreeSet<>()).add(toModule);
          Set<String> allowed = moduleArrows.get(s.module());
          if (!modulesToAnything.contains(s.module()) && (allowed == null || !allowed.contains(toModule))) {
            out.add(s.file() + ": module " + s.module() + " → " + toModule + " is not an arrow of README's Modules");
          }
        }
        String to = roomOf(target);
        Room room = rooms.get(from);
        if (to != null && !to.equals(from)
            && (room.mayImportAny() ? room.mayImport().contains(to) : !room.mayImport().contains(to))) {
          out.add(s.file() + ": room " + from + " → " + to + " (" + s.pkg() + " → " + target
              + ") is not an arrow of docs/design/layout.md");
        }
      }
    }
    for (Map.Entry<String, Set<String>> e : moduleArrows.entrySet()) {
      for (String to : e.getValue()) {
        if (!moduleArrowsUsed.getOrDefault(e.getKey(), Set.of()).contains(to)) {
          out.add("README's Modules lists " + e.getKey() + " → " + to + ", which no import uses");
        }
      }
    }
    for (Room r : rooms.values()) {
      if (sources.stream().noneMatch(s -> r.name().equals(roomOf(s.pkg())))) {
        out.add("room " + r.name() + " of docs/design/layout.md holds no main source");
      }
    }
    out.addAll(cycles(packageArrows));
    return out;
  }

  /**
   * Package cycles, each once: an arrow a room marks {@code (constructs)} (an API package making its implementation)
   * is left out, every other arrow counts.
   */
  private List<String> cycles(Map<String, Set<String>> arrows) {
    Map<String, Set<String>> graph = new TreeMap<>();
    arrows.forEach((from, tos) -> {
      Room room = rooms.get(roomOf(from));
      for (String to : tos) {
        String toRoom = roomOf(to);
        if (room == null || toRoom == null || !room.constructs().contains(toRoom)) {
          graph.computeIfAbsent(from, k -> new TreeSet<>()).add(to);
        }
      }
    });
    List<String> out = new ArrayList<>();
    Set<String> reported = new LinkedHashSet<>();
    for (String start : graph.keySet()) {
      List<String> path = cycleThrough(start, graph);
      if (path != null) {
        List<String> key = new ArrayList<>(path.subList(0, path.size() - 1));
        key.sort(Comparator.naturalOrder());
        if (reported.add(String.join(",", key))) {
          out.add("package cycle: " + String.join(" → ", path));
        }
      }
    }
    return out;
  }

  /** A shortest path from {@code start} back to itself, or null. */
  private static List<String> cycleThrough(String start, Map<String, Set<String>> graph) {
    Map<String, String> parent = new HashMap<>();
    List<String> frontier = new ArrayList<>(List.of(start));
    while (!frontier.isEmpty()) {
      List<String> next = new ArrayList<>();
      for (String at : frontier) {
        for (String to : graph.getOrDefault(at, Set.of())) {
          if (to.equals(start)) {
            List<String> path = new ArrayList<>();
            for (String p = at; p != null; p = parent.get(p)) {
              path.add(0, p);
            }
            path.add(start);
            return path;
          }
          if (!parent.containsKey(to) && !to.equals(start)) {
            parent.put(to, at);
            next.add(to);
          }
        }
      }
      frontier = next;
    }
    return null;
  }
}
