package dev.thaw.cli;

import static dev.thaw.cli.ThawCliTest.assertOneLineError;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.cli.ThawCliTest.Run;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the image commands end to end on the simulated device and the real RocksDB store: output, JSON, exit codes,
 * one-line errors.
 */
class ImageCommandsTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir
  Path dir;

  private Path store;
  private ThawCli cli;
  private Path request;

  @BeforeEach
  void setUp() throws Exception {
    store = dir.resolve("from-env");
    cli = new ThawCli(Map.of("THAW_STORE", store.toString()), GpuDrivers::open);
    request = Files.writeString(dir.resolve("req.json"), "{\"a\": 2.5}");
  }

  /** The real store the commands use, opened read-only. */
  private RocksChunkStore readStore() {
    return RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true));
  }

  private Run thaw(String... args) {
    return ThawCliTest.run(cli, args);
  }

  private Run build(String tag, String... extra) {
    List<String> args = new ArrayList<>(List.of("build", "--device", "sim", "--function",
        SaxpyFunction.class.getName(), "--config", "{\"n\": 3000, \"seed\": 3}", "--tag", tag, "--sample-request",
        request.toString()));
    args.addAll(List.of(extra));
    return thaw(args.toArray(String[]::new));
  }

  @Test
  void buildThenRunAnswersAndPrintsEachPhase() throws Exception {
    Run b = build("saxpy:1");
    assertEquals(0, b.exit(), b.err());
    assertTrue(b.out().startsWith("built    saxpy:1\n" + CheckCommand.SIMULATED_NOTE), b.out());
    assertTrue(b.out().contains("snapshot") && b.out().contains("GB/s"), b.out());
    assertTrue(Files.exists(store.resolve("CURRENT")), "THAW_STORE names the store");

    Run elsewhere = thaw("run", "saxpy:1", "--device", "sim", "--request", request.toString(), "--store",
        dir.resolve("opt").toString());
    assertEquals(ThawCli.EXIT_FAILED, elsewhere.exit(), "--store overrides THAW_STORE");
    assertOneLineError(elsewhere, "store " + dir.resolve("opt") + ": there is no store here");
    assertTrue(Files.notExists(dir.resolve("opt")), "run never creates a store");

    Run r = thaw("run", "saxpy:1", "--device", "sim", "--request", request.toString(), "--store", store.toString());
    assertEquals(0, r.exit(), r.err());
    for (String phase : List.of("open manifest", "map allocations", "load modules", "copy + verify",
        "rebuild state", "invoke")) {
      assertTrue(r.out().contains("  " + phase), phase + " missing:\n" + r.out());
    }
    JsonNode response = JSON.readTree(r.out().substring(0, r.out().indexOf("}\n") + 1));
    Run rj = thaw("run", "saxpy:1", "--device", "sim", "--request", request.toString(), "--json");
    JsonNode root = JSON.readTree(rj.out());
    assertEquals(response, root.get("response"));
    assertTrue(root.get("restore").get("copyMillis").asDouble() > 0, rj.out());
  }

  @Test
  void buildJsonAndImagesShowSharing() throws Exception {
    Run b = build("a", "--json");
    assertEquals(0, b.exit(), b.err());
    JsonNode built = JSON.readTree(b.out());
    assertEquals(3L * 4 * 3000, built.get("totalBytes").asLong());
    assertTrue(built.get("newBytes").asLong() > 0);
    assertEquals(0, build("b", "--json").exit());

    JsonNode list = JSON.readTree(thaw("images", "--json").out());
    assertEquals(2, list.size());
    for (JsonNode image : list) {
      assertEquals(0, image.get("uniqueBytes").asLong(), "identical images share every chunk");
      assertTrue(image.get("sharedBytes").asLong() > image.get("sizeBytes").asLong() - 1, image.toString());
    }
    Run table = thaw("images");
    assertTrue(table.out().startsWith("TAG"), table.out());
    assertTrue(table.out().contains("\na ") && table.out().contains("\nb "), table.out());
  }

  @Test
  void inspectPrintsTheManifestAndJsonIsTheManifest() throws Exception {
    build("saxpy:1");
    Run r = thaw("inspect", "saxpy:1");
    assertEquals(0, r.exit(), r.err());
    assertTrue(r.out().contains("function   " + SaxpyFunction.class.getName()), r.out());
    assertTrue(r.out().contains("thaw_test_saxpy (4 params, 28 bytes)"), r.out());
    Run j = thaw("inspect", "saxpy:1", "--json");
    ImageManifest m = ImageManifest.read(j.out().getBytes());
    assertEquals(List.of("x", "y", "out"), m.allocations().stream().map(ImageManifest.Allocation::name).toList());
  }

  @Test
  void verifyNamesADamagedChunkAndExitsOne() throws Exception {
    build("saxpy:1");
    assertEquals(0, thaw("verify").exit());
    Digest victim;
    try (RocksChunkStore s = readStore()) {
      victim = ImageManifest.read(s.manifest("saxpy:1").orElseThrow()).allocations().get(0).chunks().get(0).digest();
    }
    StoreFiles.corrupt(store, victim);
    Run r = thaw("verify", "saxpy:1");
    assertEquals(ThawCli.EXIT_FAILED, r.exit());
    assertTrue(r.out().contains("FAIL  saxpy:1") && r.out().contains(victim.toString()), r.out());

    Run run = thaw("run", "saxpy:1", "--device", "sim", "--request", request.toString());
    assertEquals(ThawCli.EXIT_FAILED, run.exit());
    assertOneLineError(run, "chunk " + victim + " is corrupt");
    assertEquals("", run.out(), "no response from unverified data");
  }

  @Test
  void rmThenGcFreesTheChunksAndAMissingTagExitsFour() throws Exception {
    build("saxpy:1");
    long chunks;
    try (RocksChunkStore s = readStore()) {
      chunks = s.chunkCount();
    }
    assertEquals(0, thaw("rm", "saxpy:1").exit());
    Run again = thaw("rm", "saxpy:1");
    assertEquals(ThawCli.EXIT_NOT_FOUND, again.exit());
    assertOneLineError(again, "no image tagged 'saxpy:1'");
    Run gc = thaw("gc");
    assertTrue(gc.out().matches("freed    " + chunks + " chunks \\([0-9.]+ [KMG]?i?B\\), [0-9.]+ [KMG]?i?B on disk\\n"),
        gc.out());
    try (RocksChunkStore s = readStore()) {
      assertEquals(0, s.chunkCount());
    }
    assertEquals(ThawCli.EXIT_NOT_FOUND, thaw("inspect", "nope").exit());
    assertEquals(ThawCli.EXIT_NOT_FOUND, thaw("run", "nope", "--device", "sim", "--request", request.toString())
        .exit());
  }

  @Test
  void badBuildInputIsAUsageErrorAndAFailingBuildIsOneLine() throws Exception {
    Run badTag = build("bad tag");
    assertEquals(ThawCli.EXIT_USAGE, badTag.exit());
    assertOneLineError(badTag, "'bad tag' is not a tag");
    Run badConfig = thaw("build", "--device", "sim", "--function", "x.Y", "--tag", "t", "--config", "{nope");
    assertEquals(ThawCli.EXIT_USAGE, badConfig.exit());
    assertOneLineError(badConfig, "the config is not JSON");
    Run missing = thaw("build", "--device", "sim", "--function", "x.Y", "--tag", "t", "--sample-request",
        dir.resolve("absent.json").toString());
    assertEquals(ThawCli.EXIT_USAGE, missing.exit());
    assertOneLineError(missing, "cannot read sample request");

    Run unknown = thaw("build", "--device", "sim", "--function", "no.such.Fn", "--tag", "t");
    assertEquals(ThawCli.EXIT_FAILED, unknown.exit());
    assertOneLineError(unknown, "no function class no.such.Fn on the class path");
    Run init = thaw("build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 0}", "--tag", "t");
    assertEquals(ThawCli.EXIT_FAILED, init.exit());
    assertOneLineError(init, "init of " + SaxpyFunction.class.getName() + " failed: n must be positive");
    try (RocksChunkStore s = readStore()) {
      assertTrue(s.tags().isEmpty());
    }
  }

  @Test
  void helpListsTheImageCommandsAndTheNewExitCode() {
    Run r = thaw("--help");
    for (String s : List.of("build", "images", "inspect", "run", "verify", "rm", "gc", "export", "import",
        "THAW_STORE", "no such image")) {
      assertTrue(r.out().contains(s), "help lacks '" + s + "'");
    }
  }
}
