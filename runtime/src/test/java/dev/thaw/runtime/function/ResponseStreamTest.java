package dev.thaw.runtime.function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Pins a response stream's contract: parts in order until cancelled, none after; cancel hooks run exactly once. */
class ResponseStreamTest {

  private static JsonNode part(int n) {
    return JsonNodeFactory.instance.objectNode().put("n", n);
  }

  @Test
  void partsReachTheReceiverInOrderUntilTheCallerCancels() {
    List<JsonNode> got = new ArrayList<>();
    ResponseStream s = ResponseStream.streamed(got::add);
    assertTrue(s.streamed());
    s.part(part(0));
    s.part(part(1));
    assertFalse(s.cancelled());
    s.cancel();
    assertTrue(s.cancelled());
    s.part(part(2));
    assertEquals(List.of(part(0), part(1)), got, "none after the cancel");
  }

  @Test
  void cancelHooksRunOnceAndAHookAddedAfterRunsAtOnce() {
    ResponseStream s = ResponseStream.unstreamed();
    assertFalse(s.streamed());
    s.part(part(0));
    AtomicInteger runs = new AtomicInteger();
    s.onCancel(runs::incrementAndGet);
    s.cancel();
    s.cancel();
    assertEquals(1, runs.get(), "idempotent");
    s.onCancel(runs::incrementAndGet);
    assertEquals(2, runs.get(), "a late hook runs at once");
  }

  @Test
  void aStreamedResponseNeedsAReceiver() {
    assertThrows(IllegalArgumentException.class, () -> ResponseStream.streamed(null));
  }
}
