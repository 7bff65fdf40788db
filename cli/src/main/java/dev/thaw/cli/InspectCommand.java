package dev.thaw.cli;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.image.GroupImage;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.Images;
import dev.thaw.image.store.ChunkStore;
import java.io.PrintWriter;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParentCommand;
import picocli.CommandLine.Spec;

/** {@code thaw inspect TAG}: what an image holds. */
@Command(name = "inspect",
    header = "Show an image's manifest: function, device, allocations, modules.",
    description = {"Also when and by which Thaw it was built, its samples and its access profile. With --json, the "
        + "manifest itself (see docs/image-format.md).", ""})
final class InspectCommand implements Callable<Integer> {

  @ParentCommand
  ThawCli cli;

  @Spec
  CommandSpec spec;

  @Mixin
  StoreOption store;

  @Parameters(index = "0", paramLabel = "TAG", converter = TagParameters.Tag.class, description = "The image's tag.")
  String tag;

  @Option(names = "--json", description = "Print the manifest as JSON.")
  boolean json;

  @Option(names = {"-h", "--help"}, usageHelp = true, description = "Show this help message and exit.")
  boolean help;

  @Override
  public Integer call() {
    PrintWriter out = spec.commandLine().getOut();
    try (ChunkStore s = store.open(cli, StoreAccess.READ)) {
      if (s.manifest(tag).isEmpty() && s.manifest(GroupImage.rankTag(tag, 0)).isPresent()) {
        printGroup(GroupImage.read(s, tag), out);
        return ThawCli.EXIT_OK;
      }
      ImageManifest m = Images.manifest(s, tag);
      if (json) {
        out.println(Json.write(m.toTree()));
      } else {
        out.printf("tag        %s%n", tag);
        out.printf("function   %s %s%n", m.function().className(), m.function().config());
        out.printf("device     %s (%s, compute %s, %s driver)%n", m.device().name(), m.device().smArch(),
            m.device().computeCapability(), m.device().driver());
        out.printf("built      %s by Thaw %s in %s%n", m.build().created(), m.build().thawVersion(),
            Format.millis(m.build().buildMillis()));
        out.printf("memory     %s in %d allocations; %d chunks, %s unique%n", Format.bytes(m.totalBytes()),
            m.allocations().size(), m.build().chunkCount(), Format.bytes(m.build().uniqueBytes()));
        for (ImageManifest.Allocation a : m.allocations()) {
          out.printf(Locale.ROOT, "  %-40s 0x%x  %10s  %d chunks%n", a.name(), a.address(), Format.bytes(a.size()),
              a.chunks().size());
        }
        out.printf("modules    %d%n", m.modules().size());
        for (ImageManifest.Module mod : m.modules()) {
          out.printf(Locale.ROOT, "  %-20s %s cubin %s, %d kernels%n", mod.name(), mod.arch(),
              Format.bytes(mod.cubin().length()), mod.kernels().size());
          mod.kernels().forEach(k -> out.printf("    %s (%d params, %d bytes)%n", k.name(), k.params().size(),
              k.paramBytes()));
        }
        out.printf("samples    %d%n", m.samples().size());
        ImageManifest.Profile p = m.profile();
        if (p.kernels().isEmpty()) {
          out.printf("profile    (none recorded: build with --sample-request to profile)%n");
        } else {
          out.printf("profile    %s from %d launches; first-access order (%s) of %d allocations: %s%n",
              p.summary(), p.launches(), p.orderSource(), p.firstAccessOrder().size(),
              p.firstAccessOrder().stream().limit(8).collect(Collectors.joining(", "))
                  + (p.firstAccessOrder().size() > 8 ? ", ..." : ""));
          p.kernels().forEach((k, v) -> {
            out.printf("  %-40s %-7s %d launches%n", k, v.verdict().name().toLowerCase(Locale.ROOT),
                v.launches());
            v.reasons().forEach(r -> out.printf("      %s%n", r));
          });
        }
      }
      out.flush();
      return ThawCli.EXIT_OK;
    }
  }

  /** A tensor-parallel group: its manifest and each rank's image in brief (inspect a rank's tag for the whole of it). */
  private void printGroup(GroupImage.Stored g, PrintWriter out) {
    List<ImageManifest> ranks = g.ranks();
    if (json) {
      ObjectNode node = Json.MAPPER.createObjectNode();
      node.put("tag", tag);
      node.put("build", g.group().build());
      node.put("function", ranks.get(0).function().className());
      node.set("config", g.group().config());
      ArrayNode each = node.putArray("ranks");
      for (int r = 0; r < ranks.size(); r++) {
        ImageManifest m = ranks.get(r);
        each.addObject().put("tag", g.group().rankTags().get(r)).put("device", g.group().devices().get(r))
            .put("totalBytes", m.totalBytes()).put("allocations", m.allocations().size())
            .put("profile", m.profile().summary());
      }
      out.println(Json.write(node));
    } else {
      out.printf("tag        %s (a tensor-parallel group of %d ranks, build %s)%n", tag, ranks.size(),
          g.group().build());
      out.printf("function   %s %s%n", ranks.get(0).function().className(), g.group().config());
      long total = 0;
      for (int r = 0; r < ranks.size(); r++) {
        ImageManifest m = ranks.get(r);
        total += m.totalBytes();
        out.printf("rank %-5d %s, recorded on device %d: %s in %d allocations; profile %s%n", r,
            g.group().rankTags().get(r), g.group().devices().get(r), Format.bytes(m.totalBytes()),
            m.allocations().size(), m.profile().kernels().isEmpty() ? "none" : m.profile().summary());
      }
      out.printf("memory     %s in all%n", Format.bytes(total));
    }
    out.flush();
  }
}
