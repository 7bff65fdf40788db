package dev.thaw.server;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.pool.cache.HostCacheOptions;
import org.junit.jupiter.api.Test;

/** Pins the host cache's layout as a server option: its default, its JSON form both ways, a clear error. */
class ServerOptionsTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @Test
  void theHostCacheLayoutIsRunsByDefaultAndReadsFromTheConfig() throws Exception {
    ServerOptions o = new ServerOptions();
    assertEquals(HostCacheOptions.Layout.RUNS, o.hostCacheLayout());
    assertEquals("runs", o.toJson().get("hostCacheLayout").asText());
    ServerOptions shared = ServerOptions.fromJson(JSON.readTree("{\"hostCacheBytes\": 1048576, "
        + "\"hostCacheLayout\": \"shared\"}"));
    assertEquals(HostCacheOptions.Layout.SHARED, shared.hostCacheLayout());
    assertEquals(HostCacheOptions.Layout.SHARED, shared.hostCacheOptions().layout());
    assertEquals(1048576, shared.hostCacheOptions().capacityBytes());
    assertEquals(HostCacheOptions.Layout.SHARED,
        ServerOptions.fromJson(shared.toJson()).hostCacheLayout(), "round trip");
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> ServerOptions.fromJson(JSON.readTree("{\"hostCacheLayout\": \"tidy\"}")));
    assertTrue(e.getMessage().contains("runs or shared"), e.getMessage());
  }
}
