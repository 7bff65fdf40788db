package dev.thaw.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.thaw.server.proxy.ProxyOptions;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * {@code thaw proxy}'s two parsers, kept in step: the fast one {@link ThawCli#main} runs (no picocli) takes exactly the
 * options picocli's model of the command has, and yields the same options; anything else goes to picocli.
 */
class ProxyCommandTest {

  static final Map<String, String> ENV = Map.of("PORT", "9090", "THAW_FUNCTION_KEY", "tenant-key-0123456789");

  @Test
  void theFastParserKnowsEveryOptionOfTheCommandAndNoOther() {
    TreeSet<String> picocli = new TreeSet<>(new CommandLine(new ProxyCommand(ENV)).getCommandSpec().optionsMap()
        .keySet());
    picocli.removeAll(List.of("-h", "--help"));
    assertEquals(picocli, new TreeSet<>(ProxyCommand.FAST_OPTIONS));
  }

  @Test
  void bothParsersYieldTheSameOptions() {
    for (String[] args : new String[][] {
        {"--function", "f=registry.example.com/thaw/f:1"},
        {"--socket", "/tmp/x.sock", "--function=f=localhost:5000/a/b@sha256:" + "a".repeat(64), "--host", "0.0.0.0",
            "--port", "0", "--keep-alive", "300s", "--max-instances", "2", "--min-instances", "0",
            "--queue-capacity", "8", "--drain-timeout", "5s"}}) {
      ProxyCommand picocli = new ProxyCommand(ENV);
      new CommandLine(picocli).parseArgs(args);
      ProxyCommand fast = ProxyCommand.parseFast(ENV, args);
      assertNotNull(fast, String.join(" ", args));
      assertEquals(describe(picocli.options()), describe(fast.options()), String.join(" ", args));
    }
  }

  private static String describe(ProxyOptions o) {
    return o.host() + " " + o.port() + " " + o.socket() + " " + o.function() + " " + o.image() + " "
        + o.functionOptions() + " " + o.drainTimeout() + " " + o.tenantKey();
  }

  @Test
  void anythingElseIsLeftToPicocli() {
    for (String[] args : new String[][] {{"--help"}, {"-h"}, {"--function", "f=a.b/c:1", "--keepalive", "3s"},
        {"--function", "f=a.b/c:1", "--port", "x"}, {"--socket", "/x.sock"}, {"--function"}}) {
      assertNull(ProxyCommand.parseFast(ENV, args), String.join(" ", args));
    }
  }
}
