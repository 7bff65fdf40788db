package dev.thaw.image.registry;

import static com.github.tomakehurst.wiremock.client.WireMock.aResponse;
import static com.github.tomakehurst.wiremock.client.WireMock.containing;
import static com.github.tomakehurst.wiremock.client.WireMock.equalTo;
import static com.github.tomakehurst.wiremock.client.WireMock.get;
import static com.github.tomakehurst.wiremock.client.WireMock.getRequestedFor;
import static com.github.tomakehurst.wiremock.client.WireMock.head;
import static com.github.tomakehurst.wiremock.client.WireMock.patch;
import static com.github.tomakehurst.wiremock.client.WireMock.patchRequestedFor;
import static com.github.tomakehurst.wiremock.client.WireMock.post;
import static com.github.tomakehurst.wiremock.client.WireMock.postRequestedFor;
import static com.github.tomakehurst.wiremock.client.WireMock.put;
import static com.github.tomakehurst.wiremock.client.WireMock.putRequestedFor;
import static com.github.tomakehurst.wiremock.client.WireMock.urlEqualTo;
import static com.github.tomakehurst.wiremock.client.WireMock.urlPathEqualTo;
import static com.github.tomakehurst.wiremock.client.WireMock.urlPathMatching;
import static com.github.tomakehurst.wiremock.stubbing.Scenario.STARTED;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.github.tomakehurst.wiremock.WireMockServer;
import com.github.tomakehurst.wiremock.client.WireMock;
import com.github.tomakehurst.wiremock.core.WireMockConfiguration;
import com.github.tomakehurst.wiremock.http.Fault;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.registry.ThawArtifact.Blob;
import dev.thaw.image.registry.ThawArtifact.ChunkRef;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Pins the faults a real registry rarely shows, on WireMock serving a real image's artifact into the real
 * RocksDB store: 5xx and 429 are retried (429 after its Retry-After), a body cut off midway is fetched again, an
 * upload cut off starts over, a blob whose bytes do not match its digest is refused and nothing is committed, a
 * manifest over the limit is refused both ways, bearer tokens come from the challenge's realm, and large blobs go
 * up in PATCH parts with their ranges.
 */
class RegistryFaultsTest {

  private static final String REPO = "t/img";
  private static final String OCI = ThawArtifact.OCI_MANIFEST;

  @TempDir
  static Path tmp;

  private static RocksChunkStore source;
  private static ImageManifest manifest;
  private static byte[] config;
  private static byte[] oci;
  private static Map<Digest, byte[]> chunks;

  private WireMockServer wm;
  private RocksChunkStore target;
  private static int stores;

  @BeforeAll
  static void buildImage() throws Exception {
    source = RocksChunkStore.open(tmp.resolve("source"));
    manifest = TestImages.build(source, "saxpy", 1200, 3);
    config = source.manifest("saxpy").orElseThrow();
    chunks = TestImages.chunks(source, "saxpy");
    List<Blob> layers = ThawArtifact.pullOrder(manifest).stream().map(Blob::chunk).toList();
    oci = ThawArtifact.ociManifest(manifest, Digest.of(config), config.length, layers, null);
  }

  @AfterAll
  static void closeSource() {
    source.close();
  }

  @BeforeEach
  void start() {
    wm = new WireMockServer(WireMockConfiguration.options().dynamicPort().bindAddress("127.0.0.1"));
    wm.start();
    target = RocksChunkStore.open(tmp.resolve("target-" + stores++));
  }

  @AfterEach
  void stop() {
    wm.stop();
    target.close();
  }

  private RegistryReference ref() {
    return RegistryReference.parse("127.0.0.1:" + wm.port() + "/" + REPO + ":1");
  }

  private static RegistryOptions fast() {
    return new RegistryOptions().setInitialBackoff(Duration.ofMillis(5)).setMaxBackoff(Duration.ofMillis(20))
        .setTransfers(2);
  }

  /** Serves the whole artifact, each blob at its digest. */
  private void serveArtifact() {
    wm.stubFor(get(urlEqualTo("/v2/" + REPO + "/manifests/1")).atPriority(10)
        .willReturn(aResponse().withHeader("Content-Type", OCI).withBody(oci)));
    wm.stubFor(get(urlEqualTo(blob(Digest.of(config)))).atPriority(10).willReturn(aResponse().withBody(config)));
    chunks.forEach((d, b) -> wm.stubFor(get(urlEqualTo(blob(d))).atPriority(10).willReturn(aResponse().withBody(b))));
  }

  private static String blob(Digest d) {
    return "/v2/" + REPO + "/blobs/" + d;
  }

  private static Digest someChunk() {
    return ThawArtifact.pullOrder(manifest).get(3).digest();
  }

  @Test
  void serverErrorsAreRetriedAndThePullCompletes() throws Exception {
    serveArtifact();
    String url = "/v2/" + REPO + "/manifests/1";
    wm.stubFor(get(urlEqualTo(url)).atPriority(1).inScenario("5xx").whenScenarioStateIs(STARTED)
        .willReturn(aResponse().withStatus(500)).willSetStateTo("one"));
    wm.stubFor(get(urlEqualTo(url)).atPriority(1).inScenario("5xx").whenScenarioStateIs("one")
        .willReturn(aResponse().withStatus(503)).willSetStateTo("two"));
    wm.stubFor(get(urlEqualTo(blob(someChunk()))).atPriority(1).inScenario("502").whenScenarioStateIs(STARTED)
        .willReturn(aResponse().withStatus(502)).willSetStateTo("ok"));

    new ImagePuller(fast()).pull(ref(), target, "saxpy");
    wm.verify(3, getRequestedFor(urlEqualTo(url)));
    wm.verify(2, getRequestedFor(urlEqualTo(blob(someChunk()))));
    assertArrayEquals(config, target.manifest("saxpy").orElseThrow());
    TestImages.restoreAndCheck(target, "saxpy");
  }

  @Test
  void serverErrorsThatOutlastTheAttemptsFailWithTheStatus() {
    wm.stubFor(get(urlEqualTo("/v2/" + REPO + "/manifests/1")).willReturn(aResponse().withStatus(503)));
    RegistryException e = assertThrows(RegistryException.class,
        () -> new ImagePuller(fast().setMaxAttempts(3)).pull(ref(), target, "saxpy"));
    assertEquals(503, e.status());
    wm.verify(3, getRequestedFor(urlEqualTo("/v2/" + REPO + "/manifests/1")));
    assertTrue(target.tags().isEmpty());
  }

  @Test
  void a429IsRetriedAfterItsRetryAfterAndOneTooLongFailsAtOnce() {
    Digest d = someChunk();
    wm.stubFor(head(urlEqualTo(blob(d))).inScenario("429").whenScenarioStateIs(STARTED)
        .willReturn(aResponse().withStatus(429).withHeader("Retry-After", "1")).willSetStateTo("ok"));
    wm.stubFor(head(urlEqualTo(blob(d))).inScenario("429").whenScenarioStateIs("ok")
        .willReturn(aResponse().withStatus(200).withHeader("Content-Length", "1500")));
    try (RegistryClient client = new RegistryClient("127.0.0.1:" + wm.port(), fast())) {
      long t = System.nanoTime();
      assertEquals(1500L, client.blobSize(REPO, d).orElseThrow());
      assertTrue(System.nanoTime() - t >= 1_000_000_000L, "waited the second Retry-After asked for");
      assertEquals(1, client.retries());

      wm.stubFor(head(urlEqualTo(blob(d))).atPriority(1)
          .willReturn(aResponse().withStatus(429).withHeader("Retry-After", "3600")));
      RegistryException e = assertThrows(RegistryException.class, () -> client.blobSize(REPO, d));
      assertEquals(429, e.status());
      assertTrue(e.getMessage().contains("3600"), e.getMessage());
    }
  }

  @Test
  void aConnectionCutMidBlobIsFetchedAgain() throws Exception {
    serveArtifact();
    Digest d = someChunk();
    wm.stubFor(get(urlEqualTo(blob(d))).atPriority(1).inScenario("cut").whenScenarioStateIs(STARTED)
        .willReturn(aResponse().withFault(Fault.MALFORMED_RESPONSE_CHUNK)).willSetStateTo("ok"));
    new ImagePuller(fast()).pull(ref(), target, "saxpy");
    wm.verify(2, getRequestedFor(urlEqualTo(blob(d))));
    TestImages.restoreAndCheck(target, "saxpy");
  }

  @Test
  void anUploadCutOffStartsOverInANewSession() {
    byte[] bytes = "eleven bytes".getBytes(StandardCharsets.UTF_8);
    Digest d = Digest.of(bytes);
    wm.stubFor(post(urlEqualTo("/v2/" + REPO + "/blobs/uploads/"))
        .willReturn(aResponse().withStatus(202).withHeader("Location", "/v2/" + REPO + "/blobs/uploads/u1?_state=s")));
    String put = "/v2/" + REPO + "/blobs/uploads/u1";
    wm.stubFor(put(urlPathEqualTo(put)).inScenario("reset").whenScenarioStateIs(STARTED)
        .willReturn(aResponse().withFault(Fault.CONNECTION_RESET_BY_PEER)).willSetStateTo("ok"));
    wm.stubFor(put(urlPathEqualTo(put)).inScenario("reset").whenScenarioStateIs("ok")
        .willReturn(aResponse().withStatus(201).withHeader("Docker-Content-Digest", d.toString())));
    try (RegistryClient client = new RegistryClient("127.0.0.1:" + wm.port(), fast())) {
      client.uploadBlob(REPO, d, List.of(bytes));
      assertEquals(2L * bytes.length, client.bytesUploaded());
    }
    wm.verify(2, postRequestedFor(urlEqualTo("/v2/" + REPO + "/blobs/uploads/")));
    wm.verify(2, putRequestedFor(urlPathEqualTo(put)).withQueryParam("digest", equalTo(d.toString()))
        .withQueryParam("_state", equalTo("s")));
  }

  @Test
  void aBlobWhoseBytesDoNotMatchItsDigestIsRefusedAndNothingIsCommitted() {
    serveArtifact();
    Digest d = someChunk();
    byte[] damaged = chunks.get(d).clone();
    damaged[100] ^= 1;
    wm.stubFor(get(urlEqualTo(blob(d))).atPriority(1).willReturn(aResponse().withBody(damaged)));
    CorruptBlobException e = assertThrows(CorruptBlobException.class,
        () -> new ImagePuller(fast()).pull(ref(), target, "saxpy"));
    assertEquals(d, e.expected());
    assertTrue(e.getMessage().contains(d.toString()) && e.getMessage().contains("hash to"), e.getMessage());
    wm.verify(1, getRequestedFor(urlEqualTo(blob(d))));
    assertTrue(target.tags().isEmpty());
    assertFalse(target.contains(d));
  }

  @Test
  void aBlobLongerThanItsDescriptorIsRefused() {
    serveArtifact();
    Digest d = someChunk();
    byte[] longer = Arrays.copyOf(chunks.get(d), chunks.get(d).length + 1);
    wm.stubFor(get(urlEqualTo(blob(d))).atPriority(1).willReturn(aResponse().withBody(longer)));
    assertThrows(CorruptBlobException.class, () -> new ImagePuller(fast()).pull(ref(), target, "saxpy"));
    assertTrue(target.tags().isEmpty());
  }

  @Test
  void aManifestOverTheLimitIsRefusedUnreadAndAPushTheRegistryFindsTooLargeFailsClearly() {
    byte[] huge = new byte[(4 << 20) + 1];
    Arrays.fill(huge, (byte) ' ');
    wm.stubFor(get(urlEqualTo("/v2/" + REPO + "/manifests/1"))
        .willReturn(aResponse().withHeader("Content-Type", OCI).withBody(huge)));
    ManifestTooLargeException pull = assertThrows(ManifestTooLargeException.class,
        () -> new ImagePuller(fast()).pull(ref(), target, "saxpy"));
    assertEquals(4 << 20, pull.limit());

    // Every blob present: the push goes straight to the manifest, which this registry refuses as too large.
    wm.stubFor(head(urlPathMatching("/v2/" + REPO + "/blobs/.*")).willReturn(aResponse().withStatus(200)));
    wm.stubFor(put(urlEqualTo("/v2/" + REPO + "/manifests/1")).willReturn(aResponse().withStatus(413)));
    ManifestTooLargeException push = assertThrows(ManifestTooLargeException.class,
        () -> new ImagePusher(fast()).push(source, "saxpy", ref()));
    assertEquals(413, push.status());
    assertEquals(oci.length, push.bytes());
  }

  @Test
  void bearerTokensComeFromTheChallengesRealmWithTheLoginAndAreReused() throws Exception {
    serveArtifact();
    String realm = "http://127.0.0.1:" + wm.port() + "/token";
    wm.stubFor(get(urlPathMatching("/v2/.*")).atPriority(1)
        .withHeader("Authorization", WireMock.absent())
        .willReturn(aResponse().withStatus(401).withHeader("WWW-Authenticate",
            "Bearer realm=\"" + realm + "\",service=\"wm\",scope=\"repository:" + REPO + ":pull\"")));
    wm.stubFor(get(urlPathMatching("/v2/.*")).atPriority(2)
        .withHeader("Authorization", WireMock.notContaining("Bearer tkn"))
        .willReturn(aResponse().withStatus(401)));
    wm.stubFor(get(urlPathEqualTo("/token")).withQueryParam("service", equalTo("wm"))
        .withQueryParam("scope", equalTo("repository:" + REPO + ":pull"))
        .withHeader("Authorization", containing("Basic "))
        .willReturn(aResponse().withHeader("Content-Type", "application/json").withBody("{\"token\": \"tkn\"}")));
    RegistryOptions o = fast().setCredentials(RegistryCredentials.of("127.0.0.1:" + wm.port(), "u", "p"));
    new ImagePuller(o).pull(ref(), target, "saxpy");
    wm.verify(1, getRequestedFor(urlPathEqualTo("/token")));
    TestImages.restoreAndCheck(target, "saxpy");
  }

  @Test
  void aLargeBlobGoesUpInPatchPartsWithTheirRanges() {
    byte[] bytes = "0123456789".getBytes(StandardCharsets.UTF_8);
    Digest d = Digest.of(bytes);
    String session = "/v2/" + REPO + "/blobs/uploads/s";
    wm.stubFor(post(urlEqualTo("/v2/" + REPO + "/blobs/uploads/"))
        .willReturn(aResponse().withStatus(202).withHeader("Location", session)));
    wm.stubFor(patch(urlEqualTo(session))
        .willReturn(aResponse().withStatus(202).withHeader("Location", session)));
    wm.stubFor(put(urlPathEqualTo(session)).withQueryParam("digest", equalTo(d.toString()))
        .willReturn(aResponse().withStatus(201)));
    try (RegistryClient client = new RegistryClient("127.0.0.1:" + wm.port(),
        fast().setMonolithicLimit(4).setUploadPartBytes(4))) {
      // Two arrays, so one part spans both.
      client.uploadBlob(REPO, d, List.of("012345".getBytes(StandardCharsets.UTF_8),
          "6789".getBytes(StandardCharsets.UTF_8)));
    }
    wm.verify(3, patchRequestedFor(urlEqualTo(session)));
    wm.verify(patchRequestedFor(urlEqualTo(session)).withHeader("Content-Range", equalTo("0-3"))
        .withRequestBody(equalTo("0123")));
    wm.verify(patchRequestedFor(urlEqualTo(session)).withHeader("Content-Range", equalTo("4-7"))
        .withRequestBody(equalTo("4567")));
    wm.verify(patchRequestedFor(urlEqualTo(session)).withHeader("Content-Range", equalTo("8-9"))
        .withRequestBody(equalTo("89")));
    wm.verify(1, putRequestedFor(urlPathEqualTo(session)));
  }

  /** The artifact as paths of a registry: the manifest, its config and every chunk's blob. */
  private static Map<String, byte[]> artifactPaths() {
    Map<String, byte[]> paths = new HashMap<>();
    paths.put("/v2/" + REPO + "/manifests/1", oci);
    paths.put(blob(Digest.of(config)), config);
    chunks.forEach((d, b) -> paths.put(blob(d), b));
    return paths;
  }

  @Test
  @Timeout(60)
  void aRegistryThatStopsSendingMidBlobFailsThePullInTimeAndLeavesTheStoreAsItWas() throws Exception {
    Digest d = someChunk();
    try (StallingRegistry registry = new StallingRegistry(artifactPaths(), blob(d), 100)) {
      RegistryOptions o = fast().setReadTimeout(Duration.ofMillis(300)).setMaxAttempts(3);
      long t = System.nanoTime();
      RegistryException e = assertThrows(RegistryException.class, () -> new ImagePuller(o)
          .pull(RegistryReference.parse(registry.address() + "/" + REPO + ":1"), target, "saxpy"));
      double seconds = (System.nanoTime() - t) / 1e9;
      assertTrue(e.getMessage().contains("timed out") && e.getMessage().contains(d.toString()), e.getMessage());
      assertTrue(e.getMessage().contains("failed 3 times"), e.getMessage());
      System.out.printf("a blob stalled after 100 bytes: the pull failed in %.2f s: %s%n", seconds, e.getMessage());
    }
    assertTrue(target.tags().isEmpty(), "no tag for an image not pulled whole");
    assertFalse(target.contains(d));
    assertEquals(List.of(), target.verify(), "every chunk that came is whole");
    target.releasePending(); // as the next process finds it: nothing pending
    target.collectGarbage();
    assertEquals(0, target.chunkCount(), "what came is garbage, collected");
  }

  @Test
  @Timeout(60)
  void aRegistryThatAcceptsAndNeverAnswersFailsThePullInTime() throws Exception {
    try (StallingRegistry registry = new StallingRegistry(artifactPaths(), "*", 0)) {
      RegistryOptions o = fast().setReadTimeout(Duration.ofMillis(300)).setMaxAttempts(2);
      RegistryException e = assertThrows(RegistryException.class, () -> new ImagePuller(o)
          .pull(RegistryReference.parse(registry.address() + "/" + REPO + ":1"), target, "saxpy"));
      assertTrue(e.getMessage().contains("timed out") && e.getMessage().contains("manifests/1"), e.getMessage());
      assertEquals(2, registry.connections(), "one connection per attempt: " + e.getMessage());
    }
    assertTrue(target.tags().isEmpty());
  }

  @Test
  void theChunkSetComesFromTheThawManifestNotTheLayers() {
    // An artifact that leaves one chunk out of its layers is refused before anything is fetched.
    List<Blob> missing = ThawArtifact.pullOrder(manifest).stream().skip(1).map(Blob::chunk).toList();
    byte[] short1 = ThawArtifact.ociManifest(manifest, Digest.of(config), config.length, missing, null);
    serveArtifact();
    wm.stubFor(get(urlEqualTo("/v2/" + REPO + "/manifests/1")).atPriority(1)
        .willReturn(aResponse().withHeader("Content-Type", OCI).withBody(short1)));
    InvalidArtifactException e = assertThrows(InvalidArtifactException.class,
        () -> new ImagePuller(fast()).pull(ref(), target, "saxpy"));
    ChunkRef first = ThawArtifact.pullOrder(manifest).get(0);
    assertTrue(e.getMessage().contains(first.digest().toString()), e.getMessage());
    assertTrue(target.tags().isEmpty());
  }
}
