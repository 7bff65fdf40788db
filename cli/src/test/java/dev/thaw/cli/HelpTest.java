package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.cli.ThawCliTest.Run;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import picocli.CommandLine.Model.ArgSpec;
import picocli.CommandLine.Model.CommandSpec;

/**
 * Pins that {@code thaw --help} and each command's help are whole and true: no text cut mid-sentence, nothing a user
 * pastes wrapped, every function class it names real, and the environment and exit codes those of the README.
 */
class HelpTest {

  private static final int WIDTH = new CommandLine.Model.UsageMessageSpec().width();

  private static List<CommandLine> everyCommand() {
    CommandLine root = ThawCli.commandLine(new ThawCli());
    List<CommandLine> all = new ArrayList<>();
    all.add(root);
    root.getSubcommands().values().stream().filter(c -> !c.getCommandName().equals("help")).forEach(all::add);
    return all;
  }

  private static String help(CommandLine c) {
    return c.getUsageMessage(CommandLine.Help.Ansi.OFF);
  }

  @Test
  void theCommandListGivesEachCommandOneWholeSentence() {
    Run r = ThawCliTest.run("--help");
    String commands = r.out().substring(r.out().indexOf("Commands:\n") + 10, r.out().indexOf("\nExit codes:"));
    Map<String, String> summaries = new LinkedHashMap<>();
    String current = null;
    for (String line : commands.split("\n")) {
      Matcher m = Pattern.compile("^  ([a-z]+) +(.*)$").matcher(line);
      if (m.matches()) {
        current = m.group(1);
        summaries.put(current, m.group(2).strip());
      } else if (current != null && !line.isBlank()) {
        summaries.put(current, summaries.get(current) + " " + line.strip());
      }
    }
    assertEquals(ThawCli.commandLine(new ThawCli()).getSubcommands().keySet(), summaries.keySet());
    summaries.forEach((command, summary) ->
        assertTrue(summary.endsWith("."), command + "'s summary is cut: '" + summary + "'"));
  }

  @Test
  void noHelpTextIsCutMidSentence() {
    for (CommandLine c : everyCommand()) {
      CommandSpec spec = c.getCommandSpec();
      List<String> texts = new ArrayList<>(List.of(spec.usageMessage().header()));
      texts.addAll(List.of(spec.usageMessage().description()));
      for (ArgSpec arg : spec.args()) {
        texts.addAll(List.of(arg.description()));
      }
      for (String t : texts) {
        assertTrue(t.isEmpty() || t.endsWith(".") || t.endsWith(":"),
            "'" + spec.qualifiedName() + "': a line of its help ends mid-sentence: '" + t + "'");
      }
    }
  }

  @Test
  void examplesAndTablesFitTheWidthSoNothingAUserPastesIsWrapped() {
    for (CommandLine c : everyCommand()) {
      for (String line : c.getCommandSpec().usageMessage().footer()) {
        assertTrue(line.length() <= WIDTH, "'" + c.getCommandSpec().qualifiedName() + "' footer line of "
            + line.length() + " columns would wrap: " + line);
      }
      for (String line : help(c).split("\n")) {
        assertTrue(line.length() <= WIDTH, line);
      }
    }
  }

  @Test
  void everyFunctionClassTheHelpOrTheReadmeNamesExists() throws Exception {
    StringBuilder all = new StringBuilder(Files.readString(readme()));
    everyCommand().forEach(c -> all.append(help(c)));
    // A class name, not a registry reference (serve --function NAME=HOST/REPOSITORY:TAG).
    Matcher m = Pattern.compile("--function (?:[a-z0-9]+=)?([a-z][a-z0-9_]*(?:\\.[a-zA-Z0-9_]+)+)(?![/:.\\w])")
        .matcher(all);
    int named = 0;
    while (m.find()) {
      Class.forName(m.group(1)); // throws if it does not exist
      named++;
    }
    assertTrue(named >= 3, "the help and the README name example functions");
  }

  @Test
  void theEnvironmentAndTheExitCodesAreTheReadmes() throws Exception {
    String readme = Files.readString(readme());
    CommandSpec root = ThawCli.commandLine(new ThawCli()).getCommandSpec();

    List<String> helpNames = new ArrayList<>();
    for (String line : root.usageMessage().footer()) {
      Matcher m = Pattern.compile("^  ([A-Z][A-Z_]+(?:, [A-Z][A-Z_]+)*)(?: |$)").matcher(line);
      if (m.find()) {
        helpNames.addAll(List.of(m.group(1).split(", ")));
      }
    }
    List<String> readmeNames = new ArrayList<>();
    Matcher row = Pattern.compile("(?m)^\\| (`[A-Z][A-Z_]+`(?:, `[A-Z][A-Z_]+`)*) \\|").matcher(section(readme,
        "## Configuration"));
    while (row.find()) {
      for (String n : row.group(1).split(", ")) {
        readmeNames.add(n.replace("`", ""));
      }
    }
    assertEquals(readmeNames, helpNames, "thaw --help's environment and the README's configuration table");

    List<String> helpCodes = new ArrayList<>();
    root.usageMessage().exitCodeList().forEach((k, v) -> helpCodes.add(k.strip() + ":" + v));
    List<String> readmeCodes = new ArrayList<>();
    Matcher code = Pattern.compile("(?m)^\\| ([0-9]) \\| (.+) \\|$").matcher(section(readme, "## Exit codes"));
    while (code.find()) {
      readmeCodes.add(code.group(1) + ":" + code.group(2));
    }
    assertEquals(helpCodes, readmeCodes, "thaw --help's exit codes and the README's");
  }

  /** The README's section under {@code heading}, up to the next heading of its level. */
  private static String section(String readme, String heading) {
    int at = readme.indexOf("\n" + heading + "\n");
    assertTrue(at >= 0, "the README has no " + heading);
    int end = readme.indexOf("\n## ", at + heading.length() + 1);
    return readme.substring(at, end < 0 ? readme.length() : end);
  }

  private static Path readme() {
    for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
      if (Files.isRegularFile(p.resolve("README.md")) && Files.isDirectory(p.resolve("cli"))) {
        return p.resolve("README.md");
      }
    }
    throw new AssertionError("no README.md above " + Path.of("").toAbsolutePath());
  }
}
