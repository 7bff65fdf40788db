package dev.thaw.image.registry;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.FixedSizeChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.registry.ThawArtifact.ChunkRef;
import dev.thaw.image.restore.OnDemandOptions;
import dev.thaw.image.restore.OnDemandRestorer;
import dev.thaw.image.restore.RestoreCheck;
import dev.thaw.image.restore.RestoreResources;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.runtime.function.FunctionRequest;
import dev.thaw.runtime.gpu.sim.SimDriver;
import dev.thaw.runtime.gpu.sim.SimOptions;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins push and pull against a real registry (Debian's docker-registry on loopback, started by
 * scripts/test-registry.sh; skipped with the reason when it cannot run) and the real RocksDB store: an image
 * pushed, pulled into an empty store and restored is byte-identical and answers as at build; a second push sends
 * no bytes and a variant only its new chunks; a push to another repository mounts instead of uploading; packs and
 * chunked uploads round-trip; a lazy pull fetches in first-access order, takes a restore's requests first, and
 * commits only at the end; basic auth works with a Docker credential file and fails clearly without one.
 */
class ImagePushPullTest {

  @TempDir
  static Path tmp;

  private static TestRegistry registry;
  private static RocksChunkStore source;
  private static ImageManifest saxpy;
  private static ImageManifest variant;

  @BeforeAll
  static void startRegistryAndBuild() throws Exception {
    registry = TestRegistry.start(tmp.resolve("registry"), null);
    source = RocksChunkStore.open(tmp.resolve("source"));
    saxpy = TestImages.build(source, "saxpy", 6000, 11);
    // The same seed and more elements: the first 6000 of x, y and out are the same bytes, cut the same way.
    variant = TestImages.build(source, "saxpy:variant", 6500, 11);
  }

  @AfterAll
  static void stop() throws Exception {
    if (source != null) {
      source.close();
    }
    if (registry != null) {
      registry.close();
    }
  }

  private static RegistryOptions options() {
    return new RegistryOptions().setTransfers(3);
  }

  @Test
  void anImagePushedAndPulledIntoAnEmptyStoreRestoresByteIdentical() throws Exception {
    RegistryReference ref = registry.reference("thaw/saxpy:1");
    ImagePusher.Result pushed = new ImagePusher(options()).push(source, "saxpy", ref);
    assertEquals("chunks", pushed.layout());
    assertEquals(saxpy.chunkDigests().size() + 1, pushed.blobs());

    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-1"))) {
      ImagePull.Result pulled = new ImagePuller(options()).pull(ref, empty, "saxpy:pulled");
      assertEquals(pushed.manifestDigest(), pulled.manifestDigest());
      assertEquals(saxpy.chunkDigests().size(), pulled.fetched());
      assertArrayEquals(source.manifest("saxpy").orElseThrow(), empty.manifest("saxpy:pulled").orElseThrow());
      Map<Digest, byte[]> want = TestImages.chunks(source, "saxpy");
      Map<Digest, byte[]> got = TestImages.chunks(empty, "saxpy:pulled");
      assertEquals(want.keySet(), got.keySet());
      want.forEach((d, b) -> assertArrayEquals(b, got.get(d), d.toString()));
      assertEquals(saxpy.chunkDigests().size() - saxpy.modules().size(),
          TestImages.restoreAndCheck(empty, "saxpy:pulled"));

      // A second pull of the same image into that store fetches no layer.
      ImagePull.Result again = new ImagePuller(options()).pull(ref, empty, "saxpy:again");
      assertEquals(0, again.fetched());
    }
  }

  @Test
  void aSecondPushSendsNoBytesAndAVariantOnlyItsNewChunks() {
    RegistryReference ref = registry.reference("thaw/dedup:1");
    ImagePusher pusher = new ImagePusher(options());
    ImagePusher.Result first = pusher.push(source, "saxpy", ref);
    long configBytes = source.manifest("saxpy").orElseThrow().length;
    assertEquals(first.imageBytes() + configBytes, first.bytesUploaded());

    ImagePusher.Result second = pusher.push(source, "saxpy", ref);
    assertEquals(0, second.bytesUploaded());
    assertEquals(0, second.uploaded());
    assertEquals(second.blobs(), second.existing());
    assertEquals(first.manifestDigest(), second.manifestDigest());

    ImagePusher.Result third = pusher.push(source, "saxpy:variant", registry.reference("thaw/dedup:variant"));
    Set<Digest> shared = new HashSet<>(saxpy.chunkDigests());
    long newBytes = source.manifest("saxpy:variant").orElseThrow().length;
    for (ChunkRef c : ThawArtifact.pullOrder(variant)) {
      if (!shared.contains(c.digest())) {
        newBytes += c.length();
      }
    }
    assertEquals(newBytes, third.bytesUploaded());
    assertTrue(third.bytesUploaded() < third.imageBytes(), "the variant shares chunks with the first image");
    assertTrue(third.existing() > 0);
  }

  @Test
  void aPushToAnotherRepositoryMountsEveryBlobInsteadOfUploading() {
    ImagePusher.Result first = new ImagePusher(options()).push(source, "saxpy", registry.reference("team-a/saxpy:1"));
    assertTrue(first.uploaded() > 0);
    ImagePusher.Result mounted = new ImagePusher(options().addMountFrom("team-a/saxpy"))
        .push(source, "saxpy", registry.reference("team-b/saxpy:1"));
    assertEquals(0, mounted.bytesUploaded());
    assertEquals(first.blobs(), mounted.mounted());
    assertEquals(first.manifestDigest(), mounted.manifestDigest());
  }

  @Test
  void packsAndChunkedUploadsRoundTrip() throws Exception {
    // A 2 KiB manifest limit forces packs; a 2000-byte monolithic limit sends most packs in PATCH parts.
    RegistryOptions o = options().setMaxManifestBytes(2048).setPackMinBytes(6000).setPackMaxBytes(20_000)
        .setMonolithicLimit(2000).setUploadPartBytes(1700);
    RegistryReference ref = registry.reference("thaw/packed:1");
    ImagePusher.Result pushed = new ImagePusher(o).push(source, "saxpy", ref);
    assertEquals("packs", pushed.layout());
    assertTrue(pushed.manifestBytes() <= 2048, pushed.toString());
    assertTrue(pushed.blobs() < saxpy.chunkDigests().size(), pushed.toString());
    assertThrows(ManifestTooLargeException.class, () -> new ImagePusher(new RegistryOptions(o)
        .setBlobLayout(RegistryOptions.BlobLayout.CHUNKS)).push(source, "saxpy", registry.reference("thaw/packed:2")));

    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-packs"))) {
      ImagePull.Result pulled = new ImagePuller(o).pull(ref, empty, "saxpy");
      assertEquals("packs", pulled.layout());
      TestImages.restoreAndCheck(empty, "saxpy");
    }
  }

  @Test
  void theRealRegistryRefusesAManifestOverFourMebibytesAndThePushSaysSo() {
    // Distribution caps a manifest body at 4 MiB: what Thaw's packing keeps its manifests under.
    byte[] padded = ("{\"schemaVersion\": 2, \"mediaType\": \"" + ThawArtifact.OCI_MANIFEST
        + "\", \"annotations\": {\"pad\": \"" + "x".repeat((4 << 20) + 100) + "\"}}").getBytes(StandardCharsets.UTF_8);
    try (RegistryClient client = new RegistryClient(registry.address(), options())) {
      ManifestTooLargeException e = assertThrows(ManifestTooLargeException.class,
          () -> client.putManifest("thaw/big", "1", padded, ThawArtifact.OCI_MANIFEST));
      assertEquals(400, e.status());
      assertEquals(padded.length, e.bytes());
    }
  }

  @Test
  void aLazyPullFetchesInFirstAccessOrderAndTakesARestoresRequestsFirst() throws Exception {
    RegistryReference ref = registry.reference("thaw/lazy:1");
    new ImagePusher(options()).push(source, "saxpy", ref);
    List<Digest> order = ThawArtifact.pullOrder(saxpy).stream().map(ChunkRef::digest).toList();
    // The profile's order starts with the cubin, then the allocation the sample request touched first.
    assertEquals(saxpy.modules().get(0).cubin().digest(), order.get(0));
    assertEquals(saxpy.allocations().stream().filter(a -> a.name().equals(saxpy.profile().firstAccessOrder().get(0)))
        .findFirst().orElseThrow().chunks().get(0).digest(), order.get(1));

    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-lazy"));
        ImagePull pull = new ImagePuller(options().setTransfers(1)).open(ref, empty, "saxpy")) {
      assertArrayEquals(source.manifest("saxpy").orElseThrow(), pull.manifestBytes());
      assertTrue(empty.tags().isEmpty());
      Digest last = order.get(order.size() - 1);
      pull.prioritize(last);
      pull.start().await();
      List<Digest> arrivals = pull.arrivals();
      assertEquals(last, arrivals.get(0));
      assertEquals(order.subList(0, order.size() - 1), arrivals.subList(1, arrivals.size()));
      assertEquals(List.of("saxpy"), empty.tags());
    }
  }

  @Test
  void aRestoreFromARegistryReferenceReadsThroughThePullAndTheImageIsCommittedAfter() throws Exception {
    RegistryReference ref = registry.reference("thaw/through:1");
    new ImagePusher(options()).push(source, "saxpy", ref);
    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-through"));
        ImagePull pull = new ImagePuller(options()).open(ref, empty, "saxpy")) {
      // Not started: the restore's first chunk read starts it.
      TestImages.restoreAndCheck(new PullThroughStore(empty, pull), "saxpy");
      ImagePull.Result r = pull.await();
      assertEquals(saxpy.chunkDigests().size(), r.fetched());
      TestImages.restoreAndCheck(empty, "saxpy");
    }
  }

  @Test
  void anOnDemandRestoreReadsThroughThePullAndAnswersAsTheBuildDid() throws Exception {
    // The MLP: every device access goes through its session, so on-demand restore gates all of them.
    var json = new ObjectMapper();
    var request = json.readTree("{\"inputs\": [[" + "0.5, -0.25, ".repeat(15) + "1.0, 2.0]]}");
    var o = new BuildOptions().setFunctionClass("dev.thaw.examples.mlp.MlpFunction")
        .setConfig("{\"layers\": [32, 96, 64, 10], \"seed\": 3, \"maxBatch\": 2}").setTag("mlp")
        .addSampleRequest(request).setStagingBytes(1 << 16).setHashThreads(2);
    ImageManifest mlp;
    try (var driver = SimDriver.open(new SimOptions());
        var ctx = driver.createContext(0)) {
      mlp = new ImageBuilder(source, new FixedSizeChunker(4096))
          .build(o, ctx, ProgressListener.NONE).manifest();
    }
    RegistryReference ref = registry.reference("thaw/ondemand:1");
    new ImagePusher(options()).push(source, "mlp", ref);
    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-ondemand"));
        ImagePull pull = new ImagePuller(options().setTransfers(1)).open(ref, empty, "mlp");
        var driver = SimDriver.open(new SimOptions());
        var ctx = driver.createContext(0);
        var resources = RestoreResources.create(ctx);
        var r = new OnDemandRestorer(new PullThroughStore(empty, pull)).restore(
            pull.manifest(), ctx, RestoreSource.STORE_ONLY, resources,
            new OnDemandOptions())) {
      var response = r.function().invoke(FunctionRequest.of(request)).json();
      var recorded = RestoreCheck.buildResponse(mlp, request).orElseThrow();
      assertTrue(RestoreCheck.sameJson(recorded, response), response + " vs " + recorded);
      r.awaitResident();
      assertTrue(RestoreCheck.deviceMemory(r.function()).identical());
      assertEquals(mlp.chunkDigests().size(), pull.await().fetched());
      assertEquals(List.of("mlp"), empty.tags());
    }
  }

  @Test
  void aPullClosedBeforeItFinishesCommitsNothing() throws Exception {
    RegistryReference ref = registry.reference("thaw/closed:1");
    new ImagePusher(options()).push(source, "saxpy", ref);
    try (RocksChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-closed"))) {
      ImagePull pull = new ImagePuller(options().setTransfers(1)).open(ref, empty, "saxpy");
      pull.awaitChunk(ThawArtifact.pullOrder(saxpy).get(0).digest());
      pull.close();
      assertThrows(RegistryException.class, pull::await);
      assertTrue(empty.tags().isEmpty());
    }
  }

  @Test
  void basicAuthUsesTheDockerCredentialFileAndFailsClearlyWithout() throws Exception {
    try (TestRegistry secured = TestRegistry.start(tmp.resolve("secured"), "thaw:s3cret pass")) {
      RegistryReference ref = secured.reference("thaw/private:1");
      Path config = tmp.resolve("docker-config.json");
      String auth = Base64.getEncoder().encodeToString("thaw:s3cret pass".getBytes(StandardCharsets.UTF_8));
      Files.writeString(config, "{\"auths\": {\"http://" + secured.address() + "\": {\"auth\": \"" + auth + "\"}}}");
      RegistryOptions withLogin = options().setCredentials(RegistryCredentials.load(config));

      RegistryAuthException none = assertThrows(RegistryAuthException.class,
          () -> new ImagePusher(options()).push(source, "saxpy", ref));
      assertTrue(none.getMessage().contains("basic") && none.getMessage().contains("no credentials"),
          none.getMessage());
      RegistryAuthException wrong = assertThrows(RegistryAuthException.class, () -> new ImagePusher(options()
          .setCredentials(RegistryCredentials.of(secured.address(), "thaw", "wrong"))).push(source, "saxpy", ref));
      assertEquals(401, wrong.status());

      ImagePusher.Result pushed = new ImagePusher(withLogin).push(source, "saxpy", ref);
      assertTrue(pushed.uploaded() > 0);
      try (ChunkStore empty = RocksChunkStore.open(tmp.resolve("pulled-auth"))) {
        assertThrows(RegistryAuthException.class, () -> new ImagePuller(options()).open(ref, empty, "saxpy"));
        new ImagePuller(withLogin).pull(ref, empty, "saxpy");
        TestImages.restoreAndCheck(empty, "saxpy");
      }
    }
  }
}
