package dev.thaw.pool;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.Map;

/**
 * A worker's answer to one request.
 *
 * @param json the response's JSON, as the function wrote it (UTF-8)
 * @param binary raw bytes the function returned beside it; empty when none
 * @param phases milliseconds inside the worker: {@code decode}, {@code invoke}, {@code encode}
 * @param roundTripMillis from sending INVOKE to reading its answer, in the parent
 */
public record InvokeResult(byte[] json, ByteBuffer binary, Map<String, Double> phases, double roundTripMillis) {

  private static final ObjectMapper JSON = new ObjectMapper();

  /** The response parsed. */
  public JsonNode jsonTree() {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("a worker's response is not JSON", e);
    }
  }
}
