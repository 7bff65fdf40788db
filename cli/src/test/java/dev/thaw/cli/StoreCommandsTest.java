package dev.thaw.cli;

import static dev.thaw.cli.ThawCliTest.assertOneLineError;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.cli.ThawCliTest.Run;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreChild;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.function.SaxpyFunction;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins what the store-facing commands do to the real RocksDB store on the simulated device: a damaged store
 * is never written over, exports land where the user said, and every store error is one clean line.
 */
class StoreCommandsTest {

  @TempDir
  Path dir;

  private Path store;
  private ThawCli cli;
  private Path request;

  @BeforeEach
  void setUp() throws Exception {
    store = dir.resolve("store");
    cli = new ThawCli(Map.of("THAW_STORE", store.toString()), GpuDrivers::open);
    request = Files.writeString(dir.resolve("req.json"), "{\"a\": 2.5}");
  }

  private Run thaw(String... args) {
    return ThawCliTest.run(cli, args);
  }

  private Run build(String tag) {
    return thaw("build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 3000, \"seed\": 3}", "--tag", tag, "--sample-request", request.toString());
  }

  /** Every file of a directory with its size and modification time. */
  static Map<String, String> files(Path d) throws Exception {
    Map<String, String> out = new TreeMap<>();
    try (var list = Files.list(d)) {
      for (Path f : list.toList()) {
        out.put(f.getFileName().toString(), Files.size(f) + "@" + Files.getLastModifiedTime(f).toMillis());
      }
    }
    return out;
  }

  @Test
  void aStoreWithoutCurrentIsNamedDamagedByEveryCommandAndNeverWiped() throws Exception {
    assertEquals(0, build("saxpy:1").exit());
    Files.delete(store.resolve("CURRENT"));
    Map<String, String> before = files(store);
    List<String[]> commands = new ArrayList<>(List.of(new String[] {"images"}, new String[] {"images"},
        new String[] {"inspect", "saxpy:1"}, new String[] {"verify"}, new String[] {"gc"},
        new String[] {"rm", "saxpy:1"}, new String[] {"export", "saxpy:1", dir.resolve("x.tar").toString()}));
    for (String[] c : commands) {
      Run r = thaw(c);
      assertEquals(ThawCli.EXIT_FAILED, r.exit(), String.join(" ", c) + ": " + r.out() + r.err());
      assertOneLineError(r, "is damaged");
      assertTrue(r.err().contains("CURRENT"), r.err());
      assertEquals(before, files(store), String.join(" ", c) + " changed the store's files");
    }
    Run b = build("saxpy:2");
    assertEquals(ThawCli.EXIT_FAILED, b.exit(), "a build does not create a store over a damaged one");
    assertEquals(before, files(store));
  }

  @Test
  void readCommandsWorkWhileAnotherProcessHoldsTheStoreForWriting() throws Exception {
    assertEquals(0, build("saxpy:1").exit());
    Path progress = dir.resolve("progress");
    String java = ProcessHandle.current().info().command().orElse("java");
    Process writer = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
        StoreChild.class.getName(), "open", store.toString(), progress.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("child.log").toFile()).start();
    try {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
      while (!(Files.exists(progress) && Files.readString(progress).equals("open"))) {
        assertTrue(writer.isAlive() && System.nanoTime() < deadline, () -> "the writer did not open the store: "
            + read(dir.resolve("child.log")));
        Thread.sleep(20);
      }
      for (String[] c : List.of(new String[] {"images"}, new String[] {"inspect", "saxpy:1"},
          new String[] {"verify"}, new String[] {"export", "saxpy:1", dir.resolve("a.tar").toString()},
          new String[] {"run", "saxpy:1", "--device", "sim", "--request", request.toString()})) {
        Run r = thaw(c);
        assertEquals(0, r.exit(), String.join(" ", c) + ": " + r.err());
      }
      for (String[] c : List.of(new String[] {"gc"}, new String[] {"rm", "saxpy:1"})) {
        Run r = thaw(c);
        assertEquals(ThawCli.EXIT_FAILED, r.exit(), String.join(" ", c));
        assertOneLineError(r, "store " + store + ": is in use by another process");
      }
      Run b = build("saxpy:2");
      assertEquals(ThawCli.EXIT_FAILED, b.exit());
      assertOneLineError(b, "is in use by another process");
    } finally {
      writer.destroyForcibly();
      assertTrue(writer.waitFor(30, TimeUnit.SECONDS));
    }
    assertEquals(0, thaw("rm", "saxpy:1").exit(), "the lock goes with the killed writer");
  }

  @Test
  void verifyChecksEveryImageAndNamesEveryDamagedChunk() throws Exception {
    assertEquals(0, build("a").exit());
    assertEquals(0, thaw("build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 5000, \"seed\": 9}", "--tag", "b").exit());
    List<Digest> victims = new ArrayList<>();
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      for (String tag : List.of("a", "b")) {
        ImageManifest m = ImageManifest.read(s.manifest(tag).orElseThrow());
        victims.add(m.allocations().get(0).chunks().get(0).digest());
        victims.add(m.allocations().get(1).chunks().get(0).digest());
      }
    }
    for (Digest d : victims) {
      StoreFiles.corrupt(store, d);
    }
    Run r = thaw("verify");
    assertEquals(ThawCli.EXIT_FAILED, r.exit(), r.err());
    assertTrue(r.out().contains("FAIL  a:") && r.out().contains("FAIL  b:"), r.out());
    for (Digest d : victims) {
      assertTrue(r.out().contains("      " + d + " "), d + " not named:\n" + r.out());
    }
    Run j = thaw("verify", "--json");
    assertEquals(ThawCli.EXIT_FAILED, j.exit());
    JsonNode reports = new ObjectMapper().readTree(j.out());
    assertEquals(2, reports.size());
    List<String> named = new ArrayList<>();
    for (JsonNode report : reports) {
      assertFalse(report.get("ok").asBoolean());
      report.get("damage").forEach(d -> named.add(d.get("digest").asText()));
    }
    assertEquals(victims.stream().map(Digest::toString).sorted().toList(), named.stream().sorted().toList());
  }

  @Test
  void theInfoLogStaysBounded() throws Exception {
    assertEquals(0, build("saxpy:1").exit());
    for (int i = 0; i < 8; i++) {
      assertEquals(0, thaw("gc").exit());
      assertEquals(0, thaw("images").exit());
    }
    try (var list = Files.list(store)) {
      long logs = list.filter(f -> f.getFileName().toString().startsWith("LOG")).count();
      assertTrue(logs <= 3, "info logs: " + logs);
    }
  }

  private static String read(Path f) {
    try {
      return Files.readString(f);
    } catch (Exception e) {
      return "(no log)";
    }
  }

  /**
   * Export wrote a temporary file and renamed it over the target: a symlink or a device node given as the
   * target was replaced (as root, /dev/null would be), and the archive got mode 0600 whatever the umask.
   */
  @Test
  void exportWritesOnlyToANewPathOrARegularFileWithTheUmasksMode() throws Exception {
    assertEquals(0, build("saxpy:1").exit());
    Path elsewhere = Files.writeString(dir.resolve("precious.txt"), "keep me");
    Path link = Files.createSymbolicLink(dir.resolve("link.tar"), elsewhere);
    Path fifo = dir.resolve("fifo");
    boolean haveFifo = new ProcessBuilder("mkfifo", fifo.toString()).start().waitFor() == 0;
    Path subdir = Files.createDirectory(dir.resolve("subdir"));
    for (Path target : haveFifo ? List.of(link, subdir, fifo) : List.of(link, subdir)) {
      Run r = thaw("export", "saxpy:1", target.toString());
      assertEquals(ThawCli.EXIT_FAILED, r.exit(), target + ": " + r.out());
      assertOneLineError(r, "cannot export to " + target + ": it is a");
    }
    assertTrue(Files.isSymbolicLink(link));
    assertEquals("keep me", Files.readString(elsewhere));
    assertTrue(Files.isDirectory(subdir));
    if (haveFifo) {
      assertTrue(Files.exists(fifo, LinkOption.NOFOLLOW_LINKS) && !Files.isRegularFile(fifo));
    }
    try (var list = Files.list(dir)) {
      assertEquals(List.of(), list.filter(f -> f.getFileName().toString().startsWith(".thaw-export")).toList(),
          "no temporary file is left behind");
    }

    Path fresh = dir.resolve("fresh.tar");
    assertEquals(0, thaw("export", "saxpy:1", fresh.toString()).exit());
    int umask = Integer.parseInt(new String(new ProcessBuilder("sh", "-c", "umask").start().getInputStream()
        .readAllBytes()).strip(), 8);
    assertEquals(PosixFilePermissions.toString(permissions(0666 & ~umask)),
        PosixFilePermissions.toString(Files.getPosixFilePermissions(fresh)), "umask " + Integer.toOctalString(umask));

    Path existing = Files.writeString(dir.resolve("existing.tar"), "old");
    Files.setPosixFilePermissions(existing, PosixFilePermissions.fromString("rw-r-----"));
    assertEquals(0, thaw("export", "saxpy:1", existing.toString()).exit());
    assertEquals(Files.size(fresh), Files.size(existing));
    assertEquals("rw-r-----", PosixFilePermissions.toString(Files.getPosixFilePermissions(existing)),
        "an existing file keeps its mode");
  }

  @Test
  void exportIntoAMissingDirectoryIsOneLineNamingIt() throws Exception {
    assertEquals(0, build("saxpy:1").exit());
    Path target = dir.resolve("no-such-dir").resolve("a.tar");
    Run r = thaw("export", "saxpy:1", target.toString());
    assertEquals(ThawCli.EXIT_FAILED, r.exit());
    assertOneLineError(r, "cannot export to " + target + ": " + dir.resolve("no-such-dir") + " does not exist");
    Run missing = thaw("export", "nope", dir.resolve("b.tar").toString());
    assertEquals(ThawCli.EXIT_NOT_FOUND, missing.exit());
    assertOneLineError(missing, "no image tagged 'nope'");
    assertTrue(Files.notExists(dir.resolve("b.tar")));
  }

  private static Set<PosixFilePermission> permissions(int mode) {
    Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
    PosixFilePermission[] order = {PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE,
        PosixFilePermission.GROUP_READ, PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_READ};
    for (int i = 0; i < order.length; i++) {
      if ((mode & (1 << i)) != 0) {
        out.add(order[i]);
      }
    }
    return out;
  }

  /** One unreadable manifest made 'thaw images' fail for the whole store. */
  @Test
  void anUnreadableManifestIsListedWithItsReasonAndRmStillRemovesIt() throws Exception {
    assertEquals(0, build("good").exit());
    byte[] future;
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      future = new String(s.manifest("good").orElseThrow(), StandardCharsets.UTF_8)
          .replace("\"schemaVersion\" : 1", "\"schemaVersion\" : 7").getBytes(StandardCharsets.UTF_8);
    }
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setCreate(false))) {
      s.commit("future", future, ImageManifest.read(s.manifest("good").orElseThrow()).chunkDigests());
    }
    Run table = thaw("images");
    assertEquals(0, table.exit(), table.err());
    assertTrue(table.out().contains("\ngood "), table.out());
    assertTrue(table.out().contains("future") && table.out().contains("unreadable: the manifest has schemaVersion 7"),
        table.out());
    JsonNode list = new ObjectMapper().readTree(thaw("images", "--json").out());
    assertEquals(2, list.size());
    assertTrue(list.get(0).get("unreadable").asText().contains("schemaVersion 7"), list.toString());
    assertEquals("good", list.get(1).get("tag").asText());

    Run inspect = thaw("inspect", "future");
    assertEquals(ThawCli.EXIT_FAILED, inspect.exit());
    assertOneLineError(inspect, "image 'future': the manifest has schemaVersion 7");
    Run verify = thaw("verify");
    assertEquals(ThawCli.EXIT_FAILED, verify.exit());
    assertTrue(verify.out().contains("FAIL  future: unreadable manifest") && verify.out().contains("OK    good"),
        verify.out());

    Path archive = dir.resolve("good.tar");
    assertEquals(0, thaw("export", "good", archive.toString()).exit());
    assertEquals(0, thaw("rm", "future").exit());
    assertEquals(0, thaw("gc").exit());
    assertEquals(0, thaw("verify").exit(), "the good image lost nothing to the removal");
  }

  /** thaw build as a child JVM, killed once its snapshot has started writing: no image, and gc frees the rest. */
  @Test
  void aBuildKilledMidSnapshotLeavesNoImageAndGcFreesItsPacks() throws Exception {
    assertEquals(0, build("small").exit());
    String java = ProcessHandle.current().info().command().orElse("java");
    Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), ThawCli.class.getName(),
        "build", "--device", "sim", "--function", SaxpyFunction.class.getName(), "--config",
        "{\"n\": 1500000, \"seed\": 5}", "--tag", "big", "--store", store.toString())
        .redirectErrorStream(true).redirectOutput(dir.resolve("build.log").toFile()).start();
    Path packs = store.resolve("packs");
    int before = count(packs);
    long beforeBytes = bytes(packs);
    try {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
      // Until a new pack holds bytes: one just created may still be empty when the build is killed.
      while (child.isAlive() && (count(packs) == before || bytes(packs) == beforeBytes)) {
        assertTrue(System.nanoTime() < deadline, () -> "the build never started its snapshot: "
            + read(dir.resolve("build.log")));
        Thread.sleep(5);
      }
    } finally {
      child.destroyForcibly();
      assertTrue(child.waitFor(30, TimeUnit.SECONDS));
    }
    Run images = thaw("images", "--json");
    assertEquals(0, images.exit(), images.err());
    JsonNode list = new ObjectMapper().readTree(images.out());
    // Killed before its commit (almost always): no trace of it. Had it won the race, it would be whole.
    assertTrue(list.size() == 1 || list.get(0).get("tag").asText().equals("big"), list.toString());
    assertEquals(0, thaw("verify").exit(), "every visible image is whole");
    long packBytes = bytes(packs);
    Run gc = thaw("gc", "--json");
    assertEquals(0, gc.exit(), gc.err());
    assertEquals(packBytes - bytes(packs), new ObjectMapper().readTree(gc.out()).get("diskBytes").asLong(),
        "gc counts every byte it gave back, the killed build's unindexed packs too: " + gc.out());
    assertEquals(0, thaw("verify").exit());
    if (list.size() == 1) {
      assertEquals(before, count(packs), "gc deleted the killed build's packs");
      assertTrue(packBytes > bytes(packs), "they held bytes");
    }
  }

  private static long bytes(Path d) throws Exception {
    try (var list = Files.list(d)) {
      long sum = 0;
      for (Path f : list.toList()) {
        sum += Files.size(f);
      }
      return sum;
    }
  }

  private static int count(Path d) throws Exception {
    try (var list = Files.list(d)) {
      return (int) list.count();
    }
  }
}
