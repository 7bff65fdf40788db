package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageVerifier;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.store.ChunkStore;
import java.io.PrintWriter;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw verify [TAG]}. */
@Command(name = "verify",
    header = "Check every chunk of an image (or of every image) against its digest.",
    description = {
        "Checks them all, names each missing or damaged chunk and each unreadable manifest, and then exits 1 if there "
            + "was any.",
        ""})
final class VerifyCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Parameters(index = "0", arity = "0..1", paramLabel = "TAG", converter = TagParameters.Tag.class,
      description = "The image; all images when absent.")
  String tag;

  @Option(names = "--json", description = "Print JSON, for scripts (no progress bar).")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    PrintWriter out = spec.commandLine().getOut();
    try (ChunkStore s = store.open(cli, StoreAccess.READ)) {
      ImageVerifier verifier = new ImageVerifier(s);
      List<String> tags = tag != null ? List.of(tag) : s.tags();
      boolean ok = true;
      ArrayNode reports = Json.MAPPER.createArrayNode();
      for (String t : tags) {
        ImageVerifier.Report r;
        try {
          r = verifier.verify(t, ConsoleProgress.forOutput(json));
        } catch (InvalidManifestException e) {
          // One unreadable manifest must not hide the state of the other images.
          ok = false;
          if (json) {
            ObjectNode n = reports.addObject();
            n.put("tag", t).put("ok", false).put("unreadable", e.getMessage());
          } else {
            out.printf("FAIL  %s: unreadable manifest: %s%n", t, e.getMessage());
          }
          continue;
        }
        ok &= r.ok();
        if (json) {
          reports.add(Json.tree(r).put("ok", r.ok()));
        } else {
          out.printf("%s  %s: %d chunks, %s%n", r.ok() ? "OK  " : "FAIL", t, r.chunks(), Format.bytes(r.bytes()));
          r.damage().forEach(d -> out.printf("      %s %s%n", d.digest(), d.problem()));
        }
      }
      if (json) {
        out.println(Json.write(reports));
      }
      out.flush();
      return ok ? ThawCli.EXIT_OK : ThawCli.EXIT_FAILED;
    }
  }
}
