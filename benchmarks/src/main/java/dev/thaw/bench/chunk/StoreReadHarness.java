package dev.thaw.bench.chunk;

import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;

/**
 * What restore pays per chunk: for each chunk size, stores {@code total} MiB of random chunks in a fresh
 * {@link RocksChunkStore}, flushes them to blob files, and reads them all back in random order into one
 * direct buffer (one {@code get} per chunk), with and without the verifying re-hash. One thread; the files
 * are in the page cache (just written), so this is the store's CPU cost per chunk, not the disk's.
 * Run: {@code java -cp <classpath> dev.thaw.bench.chunk.StoreReadHarness [dir] [total MiB]}.
 */
public final class StoreReadHarness {

  public static void main(String[] args) throws Exception {
    Path root = args.length > 0 ? Path.of(args[0]) : Files.createTempDirectory("thaw-store-bench");
    int totalMiB = args.length > 1 ? Integer.parseInt(args[1]) : 256;
    System.out.println("chunk | chunks | verify | reads/s | MB/s | us/read");
    for (int size = 64 << 10; size <= 4 << 20; size <<= 1) {
      Path dir = root.resolve("s" + size);
      int n = (int) ((long) totalMiB * (1 << 20) / size);
      List<Digest> digests = new ArrayList<>();
      try (RocksChunkStore s = RocksChunkStore.open(dir)) {
        SplittableRandom r = new SplittableRandom(size);
        ByteBuffer b = ByteBuffer.allocateDirect(size);
        for (int i = 0; i < n; i++) {
          b.clear();
          while (b.hasRemaining()) {
            b.putLong(r.nextLong());
          }
          b.flip();
          Digest d = Digest.of(b);
          s.putChunk(d, b);
          digests.add(d);
        }
        s.sync();
        s.flush();
      }
      for (boolean verify : new boolean[] {false, true}) {
        try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(dir).setVerifyReads(verify))) {
          ByteBuffer dst = ByteBuffer.allocateDirect(size);
          for (int round = 0; round < 3; round++) { // the last round is reported
            Collections.shuffle(digests, new Random(round));
            long t0 = System.nanoTime();
            for (Digest d : digests) {
              dst.clear();
              s.readChunk(d, dst);
            }
            long ns = System.nanoTime() - t0;
            if (round == 2) {
              double secs = ns / 1e9;
              System.out.printf("%d KiB | %d | %s | %.0f | %.0f | %.1f%n", size >> 10, n, verify,
                  n / secs, (double) n * size / 1e6 / secs, ns / 1e3 / n);
            }
          }
        }
      }
      try (var walk = Files.walk(dir)) {
        walk.sorted(Collections.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }
}
