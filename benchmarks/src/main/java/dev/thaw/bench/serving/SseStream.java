package dev.thaw.bench.serving;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * One streamed completion over a socket of its own ({@code TCP_NODELAY}), read on the calling thread: the moment the
 * request left, the moment each event carrying text arrived (its chunk read off the socket), the usage's completion
 * tokens, and what went wrong. No thread hop and no pool of the client's own between the server and the timestamps.
 */
final class SseStream {

  private static final ObjectMapper JSON = new ObjectMapper();

  /**
   * What one stream saw.
   *
   * @param sentNanos when the request was written ({@link System#nanoTime()})
   * @param textNanos when each event with text arrived, in order
   * @param choiceNanos when the first event with a choice arrived: the first token's text, or the finish when no
   *     token before it had text (a special token decodes to none); 0 for none
   * @param completionTokens the usage chunk's completion tokens (-1 without one)
   * @param error the HTTP status and body, an error event or an exception; null when the stream ended with [DONE]
   */
  record Seen(long sentNanos, List<Long> textNanos, long choiceNanos, int completionTokens, String error) {

    double ttftMillis() {
      return textNanos.isEmpty() ? Double.NaN : (textNanos.get(0) - sentNanos) / 1e6;
    }

    /** From the request to the first event with a choice ({@link #choiceNanos}); NaN for none. */
    double firstChoiceMillis() {
      return choiceNanos == 0 ? Double.NaN : (choiceNanos - sentNanos) / 1e6;
    }

    /** The gaps between consecutive text events, in milliseconds. */
    List<Double> gapsMillis() {
      List<Double> gaps = new ArrayList<>();
      for (int i = 1; i < textNanos.size(); i++) {
        gaps.add((textNanos.get(i) - textNanos.get(i - 1)) / 1e6);
      }
      return gaps;
    }

    long endNanos() {
      return textNanos.isEmpty() ? sentNanos : textNanos.get(textNanos.size() - 1);
    }
  }

  private SseStream() {}

  /** POSTs {@code body} to {@code path} and reads its events to the end. */
  static Seen post(String host, int port, String path, String body) {
    long sent = 0;
    List<Long> text = new ArrayList<>();
    long choice = 0;
    int tokens = -1;
    try (Socket socket = new Socket()) {
      socket.setTcpNoDelay(true);
      socket.connect(new InetSocketAddress(host, port), 10_000);
      socket.setSoTimeout(300_000);
      OutputStream out = socket.getOutputStream();
      InputStream in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
      byte[] b = body.getBytes(StandardCharsets.UTF_8);
      byte[] head = ("POST " + path + " HTTP/1.1\r\nHost: " + host + ":" + port + "\r\nContent-Type: application/json"
          + "\r\nContent-Length: " + b.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII);
      byte[] request = new byte[head.length + b.length];
      System.arraycopy(head, 0, request, 0, head.length);
      System.arraycopy(b, 0, request, head.length, b.length);
      sent = System.nanoTime();
      out.write(request);
      out.flush();
      String status = line(in);
      boolean chunked = false;
      int length = 0;
      for (String h = line(in); !h.isEmpty(); h = line(in)) {
        String l = h.toLowerCase(Locale.ROOT);
        chunked |= l.startsWith("transfer-encoding:") && l.contains("chunked");
        if (l.startsWith("content-length:")) {
          length = Integer.parseInt(l.substring(15).trim());
        }
      }
      if (!status.startsWith("HTTP/1.1 200") || !chunked) {
        String rest = new String(in.readNBytes(length), StandardCharsets.UTF_8);
        return new Seen(sent, text, choice, tokens, status + " " + rest);
      }
      StringBuilder pending = new StringBuilder();
      while (true) {
        int n = Integer.parseInt(line(in).split(";")[0].trim(), 16);
        if (n == 0) {
          return new Seen(sent, text, choice, tokens, "the stream ended without [DONE]");
        }
        byte[] chunk = in.readNBytes(n);
        long at = System.nanoTime();
        line(in);
        pending.append(new String(chunk, StandardCharsets.UTF_8));
        for (int end = pending.indexOf("\n\n"); end >= 0; end = pending.indexOf("\n\n")) {
          String event = pending.substring(0, end);
          pending.delete(0, end + 2);
          if (!event.startsWith("data: ")) {
            continue;
          }
          String data = event.substring(6);
          if (data.equals("[DONE]")) {
            return new Seen(sent, text, choice, tokens, null);
          }
          JsonNode chunkJson = JSON.readTree(data);
          if (chunkJson.has("error")) {
            return new Seen(sent, text, choice, tokens, "error event: " + chunkJson.get("error"));
          }
          if (chunkJson.hasNonNull("usage")) {
            tokens = chunkJson.get("usage").path("completion_tokens").asInt(-1);
          }
          if (choice == 0 && !chunkJson.path("choices").isEmpty()) {
            choice = at;
          }
          for (JsonNode c : chunkJson.path("choices")) {
            String t = c.has("delta") ? c.path("delta").path("content").asText("") : c.path("text").asText("");
            if (!t.isEmpty()) {
              text.add(at);
              break;
            }
          }
        }
      }
    } catch (IOException | RuntimeException e) {
      return new Seen(sent == 0 ? System.nanoTime() : sent, text, choice, tokens, e.toString());
    }
  }

  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream(64);
    for (int c = in.read(); c != '\n'; c = in.read()) {
      if (c < 0) {
        throw new EOFException("the server closed the connection");
      }
      if (c != '\r') {
        b.write(c);
      }
    }
    return b.toString(StandardCharsets.ISO_8859_1);
  }
}
