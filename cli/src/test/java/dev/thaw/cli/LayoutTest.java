package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The house's arrows hold: every main source file's imports against the module rules in {@code README.md} and the
 * room rules in {@code docs/design/layout.md}, no package cycles, no type named inline. Reads the source tree, so it
 * runs in the reactor (the CLI's module sees every other one) and is skipped where there is no source tree.
 */
class LayoutTest {

  /**
   * Files that still name JDK types inline: others were changing them when the house's names were imported, and
   * they are left to their merges. Take a file off once it imports its names (the test says when).
   */
  private static final Set<String> PENDING_INLINE = Set.of();

  private static Path root;

  @BeforeAll
  static void findTheSourceTree() {
    for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
      if (Files.isRegularFile(p.resolve("docs/design/layout.md")) && Files.isRegularFile(p.resolve("README.md"))) {
        root = p;
        break;
      }
    }
    Assumptions.assumeTrue(root != null, "no source tree above " + Path.of("").toAbsolutePath()
        + " (docs/design/layout.md beside README.md): nothing to check");
  }

  @Test
  void everyImportOfTheMainSourcesIsAnArrowOfTheRulesAndNoPackageIsInACycle() {
    LayoutRules rules = LayoutRules.read(root.resolve("README.md"), root.resolve("docs/design/layout.md"));
    List<LayoutRules.Source> sources = LayoutRules.sources(root);
    assertTrue(sources.size() > 300, "found only " + sources.size() + " main sources under " + root);
    List<String> violations = new ArrayList<>();
    for (String v : rules.violations(sources)) {
      String file = v.substring(0, Math.max(0, v.indexOf(':')));
      if (!(PENDING_INLINE.contains(file) && v.contains(": names java"))) {
        violations.add(v);
      }
    }
    for (String file : PENDING_INLINE) {
      sources.stream().filter(s -> s.file().equals(file)).findFirst().ifPresentOrElse(
          s -> {
            if (s.inlineTypes().isEmpty()) {
              violations.add(file + " names no type inline now: take it off PENDING_INLINE");
            }
          },
          () -> violations.add(file + " is gone: take it off PENDING_INLINE"));
    }
    assertTrue(violations.isEmpty(), violations.size() + " against the layout (docs/design/layout.md):\n"
        + String.join("\n", violations));
  }

  /**
   * The libraries log through slf4j: no {@code System.out}, {@code System.err} or {@code printStackTrace} in the main
   * code of runtime, image-builder, context-pool and restore-server, except the worker process's package, whose stderr
   * is its log (WorkerMain says why).
   */
  @Test
  void theLibrariesLogThroughSlf4jButTheWorkerWhoseStderrIsItsLog() {
    Pattern console = Pattern.compile("System\\.(out|err)\\b|\\.printStackTrace\\(");
    List<String> found = new ArrayList<>();
    for (String module : List.of("runtime", "image-builder", "context-pool", "restore-server")) {
      Path main = root.resolve(module).resolve("src/main/java");
      try (Stream<Path> files = Files.walk(main)) {
        for (Path f : files.filter(p -> p.toString().endsWith(".java")).sorted().toList()) {
          String text = Files.readString(f);
          if (text.contains("package dev.thaw.pool.worker;") || !console.matcher(LayoutRules.code(text)).find()) {
            continue;
          }
          found.add(root.relativize(f).toString());
        }
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
    assertEquals(List.of(), found, "library code writing to the console instead of logging");
  }

  /** A simple name says which type it is: no two main source files (top-level types) share one. */
  @Test
  void noTwoMainTypesShareASimpleName() {
    Map<String, List<String>> byName = new TreeMap<>();
    for (LayoutRules.Source s : LayoutRules.sources(root)) {
      String name = Path.of(s.file()).getFileName().toString();
      if (!name.equals("package-info.java")) {
        byName.computeIfAbsent(name.replace(".java", ""), k -> new ArrayList<>()).add(s.pkg());
      }
    }
    byName.values().removeIf(packages -> packages.size() < 2);
    assertEquals(Map.of(), byName, "simple names used by more than one type");
  }

  /** The check above must be able to fail: each kind of break, in a made-up house, is reported. */
  @Test
  void anArrowTheRulesDoNotListACycleAnUnplacedPackageAndAnInlineNameAreEachReported() {
    String readme = """
        ## Modules
        - `low` → nothing
        - `high` → `low`
        - `top` → anything
        ## Next
        """;
    String layout = """
        ## Rooms
        | room | packages | may import |
        | --- | --- | --- |
        | `base` | `low.base` | — |
        | `api` | `low.api` | `base`, `impl` (constructs) |
        | `impl` | `low.api.impl` | `api`, `base` |
        | `app` | `high.*` | `api` |
        | `cli` | `top` | any but `impl` |
        """;
    LayoutRules rules = new LayoutRules(LayoutRules.moduleArrows(readme), LayoutRules.modulesToAnything(readme),
        LayoutRules.rooms(layout));
    assertEquals(Map.of("low", Set.of(), "high", Set.of("low")), LayoutRules.moduleArrows(readme));
    assertEquals("app", rules.roomOf("dev.thaw.high.app.deep"));

    List<LayoutRules.Source> clean = List.of(
        source("low", "low.base", ""),
        source("low", "low.api", "import dev.thaw.low.base.Base;\nimport dev.thaw.low.api.impl.ApiImpl;"),
        source("low", "low.api.impl", "import dev.thaw.low.api.Api;\nimport static dev.thaw.low.base.Base.NAME;"),
        source("high", "high.app", "import dev.thaw.low.api.Api;\n// dev.thaw.low.base.Base in a comment\n"
            + "class A { String s = \"dev.thaw.low.base.Base\"; }"),
        source("top", "top", "import dev.thaw.low.api.Api;\nimport dev.thaw.high.app.App;"));
    assertEquals(List.of(), rules.violations(clean));

    List<LayoutRules.Source> broken = List.of(
        source("low", "low.base", "import dev.thaw.low.api.Api;"),
        source("low", "low.api", "import dev.thaw.low.base.Base;\nimport dev.thaw.low.api.impl.ApiImpl;"),
        source("low", "low.api.impl", "import dev.thaw.low.api.Api;"),
        source("high", "high.app", "import dev.thaw.low.base.Base;\nclass A { java.util.List<String> l; }"),
        source("top", "top", "import dev.thaw.low.api.impl.ApiImpl;"),
        source("top", "elsewhere", ""));
    List<String> found = rules.violations(broken);
    assertContains(found, "low/base.java: room base → api (dev.thaw.low.base → dev.thaw.low.api)");
    assertContains(found, "high/app.java: room app → base");
    assertContains(found, "high/app.java: names java.util.List inline");
    assertContains(found, "top/top.java: room cli → impl");
    assertContains(found, "top/elsewhere.java: package dev.thaw.elsewhere is in no room");
    assertContains(found, "package cycle: dev.thaw.low.api → dev.thaw.low.base → dev.thaw.low.api");
    assertEquals(6, found.size(), String.join("\n", found));

    List<LayoutRules.Source> unused = List.of(source("low", "low.base", ""), source("low", "low.api", ""),
        source("low", "low.api.impl", ""), source("high", "high.app", ""), source("top", "top", ""));
    assertEquals(List.of("README's Modules lists high → low, which no import uses"), rules.violations(unused));
  }

  private static LayoutRules.Source source(String module, String pkg, String body) {
    String file = module + "/" + pkg.substring(pkg.lastIndexOf('.') + 1) + ".java";
    return LayoutRules.source(module, file, "package dev.thaw." + pkg + ";\n\n" + body + "\n");
  }

  private static void assertContains(List<String> found, String start) {
    assertTrue(found.stream().anyMatch(f -> f.startsWith(start)), "no '" + start + "' in:\n" + String.join("\n", found));
  }
}
