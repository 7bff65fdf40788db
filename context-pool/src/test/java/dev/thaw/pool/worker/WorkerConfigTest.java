package dev.thaw.pool.worker;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The worker's config, written by the parent without Jackson, reads back as it was: awkward strings and nulls too. */
class WorkerConfigTest {

  @Test
  void whatTheParentWritesTheWorkerReadsBackExactly() {
    WorkerConfig awkward = new WorkerConfig("cuda", 3, "/data/st\"ore\\with \u00e9 and\nnewline\ttab\u0001", 256,
        null, "/dev/shm/thaw cache", 64 << 20, 4242L, -123456789012345L, true,
        List.of("mlp:1", "gpt2:\"large\"", "ünïcode/😀"), 35, 2, 1L << 20, 5L << 30);
    assertEquals(awkward, WorkerConfig.fromJson(awkward.toJson()));
    WorkerConfig plain = new WorkerConfig(null, 0, null, 0, null, null, 1, 1, 0);
    assertEquals(plain, WorkerConfig.fromJson(plain.toJson()));
  }

  @Test
  void aConfigThatIsNotOneIsRefusedSayingSo() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> WorkerConfig.fromJson("{\"ordinal\": \"zero\"}"));
    assertEquals(true, e.getMessage().startsWith("worker config: "), e.getMessage());
  }
}
