package dev.thaw.pool;

import static dev.thaw.pool.PoolTestImages.json;
import static dev.thaw.pool.PoolTesting.WAIT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A worker announces a long invoke's end (NEAR) once it has seen how long its invokes take, and the pool's reader
 * polls for that answer instead of sleeping in a read; short invokes, and a pool without wake-ahead, announce
 * nothing. Real worker processes and a real store, on the device {@code THAW_DEVICE} picks. The margins are wide (a
 * 150 ms invoke, NEAR 50 ms before its end, polled for up to 150 ms) so that a busy machine still shows it.
 */
class WakeAheadTest {

  @TempDir static Path dir;
  static PoolTestImages.Built probe;

  @BeforeAll
  static void build() throws Exception {
    probe = PoolTestImages.probe(dir.resolve("store"), "probe");
  }

  private static long[] serve(Duration wakeAhead, String request, int invokes) throws Exception {
    ContextPool pool = ContextPool.create(PoolTesting.options(dir.resolve("store")).setIdleTarget(0)
        .setWakeAhead(wakeAhead));
    try {
      Worker w = pool.acquire(0, WAIT);
      w.becomeBlocking("probe", probe.manifest(), ImageSource.store(dir.resolve("store")));
      for (int i = 0; i < invokes; i++) {
        assertTrue(w.invokeBlocking(json(request)).jsonTree().size() > 0, "answered");
      }
      long[] counts = w.wakeAheads();
      w.release();
      return counts;
    } finally {
      pool.close();
    }
  }

  @Test
  void longInvokesAreAnnouncedOnceTheWorkerKnowsTheirLengthAndTheReaderCatchesTheirAnswers() throws Exception {
    long[] counts = serve(Duration.ofMillis(50), "{\"op\": \"sleep\", \"millis\": 150}", 5);
    // The first invoke teaches the prediction; the four after it are announced.
    assertTrue(counts[0] >= 1 && counts[0] <= 4, "announced " + counts[0] + " of 4");
    assertTrue(counts[1] >= 1 && counts[1] <= counts[0], "caught " + counts[1] + " of " + counts[0]);
  }

  @Test
  void shortInvokesAndAPoolWithoutWakeAheadAnnounceNothing() throws Exception {
    assertArrayEquals(new long[] {0, 0}, serve(Duration.ofMillis(50), "{\"op\": \"echo\", \"value\": 1}", 5),
        "an echo is far below 1 ms and twice the wake-ahead");
    assertArrayEquals(new long[] {0, 0}, serve(Duration.ZERO, "{\"op\": \"sleep\", \"millis\": 150}", 3));
  }

  @Test
  void theWakeAheadIsAnOptionWithBounds() {
    assertEquals(Duration.ofNanos(500_000), new ContextPoolOptions().wakeAhead());
    assertEquals(Duration.ofMillis(2), ContextPoolOptions.fromJson(new ContextPoolOptions()
        .setWakeAhead(Duration.ofMillis(2)).toJson()).wakeAhead());
    assertEquals(Duration.ofMillis(2), new ContextPoolOptions(new ContextPoolOptions()
        .setWakeAhead(Duration.ofMillis(2))).wakeAhead());
    Assertions.assertThrows(IllegalArgumentException.class,
        () -> new ContextPoolOptions().setWakeAhead(Duration.ofSeconds(1)));
  }
}
