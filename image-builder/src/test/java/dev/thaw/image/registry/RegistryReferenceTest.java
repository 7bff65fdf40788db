package dev.thaw.image.registry;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.thaw.image.store.Digest;
import java.net.http.HttpHeaders;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Pins reference parsing, Docker credential files, challenge parameters and Retry-After. */
class RegistryReferenceTest {

  @Test
  void referencesParseLikeDockersWithAnExplicitRegistry() {
    RegistryReference r = RegistryReference.parse("localhost:5000/thaw/gpt2:large");
    assertEquals("localhost:5000", r.registry());
    assertEquals("thaw/gpt2", r.repository());
    assertEquals("large", r.tag());
    assertEquals("gpt2:large", r.defaultLocalTag());
    assertTrue(r.isLoopback());
    RegistryReference latest = RegistryReference.parse("ghcr.io/acme/models/llama");
    assertEquals("latest", latest.tag());
    assertFalse(latest.isLoopback());
    Digest d = Digest.of(new byte[] {1});
    RegistryReference pinned = RegistryReference.parse("registry.example.com:443/a/b@" + d);
    assertNull(pinned.tag());
    assertEquals(d.toString(), pinned.manifestReference());
    assertEquals("b:" + d.hex().substring(0, 12), pinned.defaultLocalTag());
    for (String bad : List.of("gpt2:large", "thaw/gpt2", "localhost:5000/Thaw/x", "localhost:5000/x:bad/tag", "")) {
      assertThrows(IllegalArgumentException.class, () -> RegistryReference.parse(bad), bad);
    }
    assertTrue(RegistryReference.looksLikeReference("localhost:5000/x"));
    assertFalse(RegistryReference.looksLikeReference("gpt2:large"));
  }

  @Test
  void dockerCredentialFilesGiveOneLoginPerRegistry(@TempDir Path dir) throws Exception {
    Path f = dir.resolve("config.json");
    String auth = Base64.getEncoder().encodeToString("alice:pa:ss".getBytes(StandardCharsets.UTF_8));
    Files.writeString(f, "{\"auths\": {\"https://ghcr.io/v1/\": {\"auth\": \"" + auth + "\"},"
        + " \"localhost:5000\": {\"username\": \"bob\", \"password\": \"pw\"},"
        + " \"helper.example.com\": {\"identitytoken\": \"x\"}}, \"credsStore\": \"desktop\"}");
    RegistryCredentials c = RegistryCredentials.load(f);
    assertEquals(new RegistryCredentials.Login("alice", "pa:ss"), c.forRegistry("ghcr.io").orElseThrow());
    assertEquals("bob", c.forRegistry("LOCALHOST:5000").orElseThrow().username());
    assertTrue(c.forRegistry("helper.example.com").isEmpty());
    assertEquals(c.source(), RegistryCredentials.fromEnvironment(Map.of("THAW_REGISTRY_AUTH", f.toString())).source());
    assertEquals(f.toString(), RegistryCredentials.fromEnvironment(Map.of("DOCKER_CONFIG", dir.toString())).source());
    assertThrows(IllegalArgumentException.class,
        () -> RegistryCredentials.fromEnvironment(Map.of("THAW_REGISTRY_AUTH", dir.resolve("none").toString())));
    assertFalse(c.forRegistry("ghcr.io").orElseThrow().toString().contains("pa:ss"), "a login never prints its password");
  }

  @Test
  void challengeParametersKeepCommasInsideQuotes() {
    Map<String, String> p = RegistryClient.challengeParams(
        "realm=\"https://auth.example.com/token\",service=\"registry\",scope=\"repository:a/b:pull,push\"");
    assertEquals("https://auth.example.com/token", p.get("realm"));
    assertEquals("repository:a/b:pull,push", p.get("scope"));
  }

  @Test
  void retryAfterIsSecondsOrAnHttpDate() {
    assertEquals(Duration.ofSeconds(7), RegistryClient.retryAfter(headers("7")).orElseThrow());
    assertEquals(Duration.ZERO, RegistryClient.retryAfter(headers("Wed, 21 Oct 2015 07:28:00 GMT")).orElseThrow());
    assertTrue(RegistryClient.retryAfter(headers("soon")).isEmpty());
  }

  private static HttpHeaders headers(String retryAfter) {
    return HttpHeaders.of(Map.of("Retry-After", List.of(retryAfter)), (a, b) -> true);
  }
}
