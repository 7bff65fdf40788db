package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ImageVerifier;
import dev.thaw.image.Images;
import dev.thaw.image.InvalidManifestException;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import java.io.PrintWriter;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw images}: every image in the store, with what it shares with the others. */
@Command(name = "images",
    header = "List the images in the store.",
    description = {
        "SIZE is the device memory an image holds; UNIQUE the bytes of chunks no other image names (what 'thaw rm' "
            + "then 'thaw gc' would free); SHARED the bytes of its chunks that other images name too. An image whose "
            + "manifest this Thaw cannot read is listed as unreadable, with the reason; 'thaw rm' removes it.",
        ""})
final class ImagesCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Option(names = "--json", description = "Print JSON instead of a table, for scripts.")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    PrintWriter out = spec.commandLine().getOut();
    try (ChunkStore s = store.open(cli, StoreAccess.READ)) {
      Map<String, ImageManifest> images = new LinkedHashMap<>();
      Map<String, String> unreadable = new LinkedHashMap<>();
      Map<Digest, Integer> users = new HashMap<>();
      for (String tag : s.tags()) {
        try {
          ImageManifest m = Images.manifest(s, tag);
          images.put(tag, m);
          ImageVerifier.chunkLengths(m).keySet().forEach(d -> users.merge(d, 1, Integer::sum));
        } catch (InvalidManifestException e) {
          // Listed, not fatal: the user must see it to 'thaw rm' it.
          unreadable.put(tag, (e.getCause() != null ? e.getCause() : e).getMessage());
        }
      }
      ArrayNode list = Json.MAPPER.createArrayNode();
      String row = "%-30s  %10s  %10s  %10s  %s%n";
      if (!json) {
        out.printf(Locale.ROOT, row, "TAG", "SIZE", "UNIQUE", "SHARED", "CREATED");
      }
      for (String tag : s.tags()) {
        ImageManifest m = images.get(tag);
        if (m == null) {
          String why = unreadable.get(tag);
          if (json) {
            list.addObject().put("tag", tag).put("unreadable", why);
          } else {
            out.printf(Locale.ROOT, "%-30s  unreadable: %s%n", tag, why);
          }
          continue;
        }
        long unique = 0;
        long shared = 0;
        for (Map.Entry<Digest, Integer> e : ImageVerifier.chunkLengths(m).entrySet()) {
          if (users.get(e.getKey()) > 1) {
            shared += e.getValue();
          } else {
            unique += e.getValue();
          }
        }
        if (json) {
          ObjectNode n = list.addObject();
          n.put("tag", tag).put("sizeBytes", m.totalBytes()).put("uniqueBytes", unique).put("sharedBytes", shared)
              .put("created", m.build().created()).put("function", m.function().className());
        } else {
          out.printf(Locale.ROOT, row, tag, Format.bytes(m.totalBytes()), Format.bytes(unique), Format.bytes(shared),
              m.build().created());
        }
      }
      if (json) {
        out.println(Json.write(list));
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }
}
