package dev.thaw.bench.store;

import com.sun.management.OperatingSystemMXBean;
import dev.thaw.image.build.Chunker;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The snapshot's host side against {@code dd}, in one run on one file system: {@code total} MiB of random bytes
 * (weights do not compress or dedup) sit in direct buffers of 64 MiB, as the pinned staging buffers hold them
 * after the device-to-host copies; then, timed, each segment is cut by FastCDC, each chunk hashed and put, on
 * {@code threads} threads as {@code ImageBuilder} does, and {@code sync()} makes it durable. Reported: that as
 * GB/s ({@code snapshot}), the store alone on chunks hashed beforehand ({@code store}), a verified read-back of
 * every chunk in a fresh process-local open ({@code read}), and {@code dd if=/dev/zero bs=64M conv=fsync} of the
 * same size into the same directory ({@code dd}).
 *
 * <p>Run: {@code java -cp <classpath> dev.thaw.bench.store.SnapshotWriteHarness DIR [total MiB] [threads]}.
 * Prints one table row per measurement and a last line of JSON.
 */
public final class SnapshotWriteHarness {

  private static final int SEGMENT = 64 << 20;

  public static void main(String[] args) throws Exception {
    Path dir = Path.of(args.length > 0 ? args[0] : System.getProperty("java.io.tmpdir"));
    int totalMiB = args.length > 1 ? Integer.parseInt(args[1]) : 1024;
    int threads = args.length > 2 ? Integer.parseInt(args[2])
        : Math.max(2, Runtime.getRuntime().availableProcessors() - 2);
    long total = (long) totalMiB << 20;
    List<ByteBuffer> segments = randomSegments(total);
    Chunker chunker = new FastCdcChunker();
    System.out.printf(Locale.ROOT, "# %s: %d MiB in %d segments, %d threads, %s%n", dir, totalMiB, segments.size(),
        threads, fileSystem(dir));
    System.out.println("| measurement | seconds | GB/s | CPU s per GB |");
    System.out.println("| --- | --- | --- | --- |");

    ExecutorService pool = Executors.newFixedThreadPool(threads);
    Path storeDir = Files.createTempDirectory(dir, "thaw-snapshot-bench");
    double snapshot;
    List<List<Chunk>> cut = new ArrayList<>();
    try {
      try (RocksChunkStore store = RocksChunkStore.open(storeDir)) {
        long t0 = System.nanoTime();
        long c0 = cpu();
        List<Future<List<Chunk>>> fs = new ArrayList<>();
        for (ByteBuffer seg : segments) {
          fs.add(pool.submit(() -> cutHashPut(seg, chunker, store)));
        }
        for (Future<List<Chunk>> f : fs) {
          cut.add(f.get());
        }
        long t1 = System.nanoTime();
        long c1 = cpu();
        store.sync();
        long t2 = System.nanoTime();
        snapshot = row("snapshot: cut + hash + put + sync", total, t2 - t0, cpu() - c0);
        row("  of which sync()", total, t2 - t1, cpu() - c1);
      }
      deleteTree(storeDir);
      Files.createDirectories(storeDir);

      double storeOnly;
      try (RocksChunkStore store = RocksChunkStore.open(storeDir)) {
        long t0 = System.nanoTime();
        long c0 = cpu();
        List<Future<?>> fs = new ArrayList<>();
        for (List<Chunk> chunks : cut) {
          fs.add(pool.submit(() -> {
            for (Chunk c : chunks) {
              store.putChunk(c.digest(), c.data());
            }
          }));
        }
        for (Future<?> f : fs) {
          f.get();
        }
        store.sync();
        storeOnly = row("store: put + sync of hashed chunks", total, System.nanoTime() - t0, cpu() - c0);
      }

      double read;
      try (RocksChunkStore store = RocksChunkStore.open(new StoreOptions().setPath(storeDir).setReadOnly(true))) {
        long t0 = System.nanoTime();
        long c0 = cpu();
        List<Future<?>> fs = new ArrayList<>();
        for (List<Chunk> chunks : cut) {
          fs.add(pool.submit(() -> {
            ByteBuffer dst = ByteBuffer.allocateDirect(SEGMENT);
            for (Chunk c : chunks) {
              store.readChunk(c.digest(), dst);
            }
          }));
        }
        for (Future<?> f : fs) {
          f.get();
        }
        read = row("read back, verified (page cache)", total, System.nanoTime() - t0, cpu() - c0);
      }
      double dd = dd(dir, total);
      System.out.printf(Locale.ROOT, "{\"dir\": \"%s\", \"mib\": %d, \"threads\": %d, \"snapshotGBps\": %.3f,"
          + " \"storeGBps\": %.3f, \"readGBps\": %.3f, \"ddGBps\": %.3f, \"snapshotOverDd\": %.3f}%n", dir, totalMiB,
          threads, snapshot, storeOnly, read, dd, snapshot / dd);
    } finally {
      pool.shutdownNow();
      deleteTree(storeDir);
    }
  }

  record Chunk(Digest digest, ByteBuffer data) {}

  private static List<Chunk> cutHashPut(ByteBuffer segment, Chunker chunker, RocksChunkStore store) {
    List<Chunk> out = new ArrayList<>();
    int pos = 0;
    for (int length : chunker.cut(segment.duplicate())) {
      ByteBuffer data = segment.slice(pos, length);
      Digest d = Digest.of(data.duplicate());
      if (!store.contains(d)) {
        store.putChunk(d, data.duplicate());
      }
      out.add(new Chunk(d, data));
      pos += length;
    }
    return out;
  }

  private static double row(String what, long bytes, long nanos, long cpuNanos) {
    double gbps = bytes / (double) nanos;
    System.out.printf(Locale.ROOT, "| %s | %.3f | %.2f | %s |%n", what, nanos / 1e9, gbps,
        cpuNanos < 0 ? "-" : String.format(Locale.ROOT, "%.2f", cpuNanos / 1e9 / (bytes / 1e9)));
    return gbps;
  }

  /** CPU time of this process, all threads (RocksDB's background threads included). */
  private static long cpu() {
    return ((OperatingSystemMXBean) ManagementFactory
        .getOperatingSystemMXBean()).getProcessCpuTime();
  }

  private static double dd(Path dir, long total) throws Exception {
    Path out = dir.resolve("thaw-dd-" + ProcessHandle.current().pid() + ".bin");
    long t0 = System.nanoTime();
    Process p = new ProcessBuilder("dd", "if=/dev/zero", "of=" + out, "bs=64M", "count=" + (total / SEGMENT),
        "conv=fsync").redirectErrorStream(true).start();
    String said = new String(p.getInputStream().readAllBytes()).strip();
    int rc = p.waitFor();
    long ns = System.nanoTime() - t0;
    Files.deleteIfExists(out);
    if (rc != 0) {
      throw new IOException("dd failed: " + said);
    }
    return row("dd bs=64M conv=fsync (" + said.lines().reduce((a, b) -> b).orElse("") + ")", total, ns, -1);
  }

  private static List<ByteBuffer> randomSegments(long total) {
    List<ByteBuffer> out = new ArrayList<>();
    SplittableRandom r = new SplittableRandom(42);
    for (long left = total; left > 0; left -= SEGMENT) {
      ByteBuffer b = ByteBuffer.allocateDirect((int) Math.min(SEGMENT, left));
      while (b.remaining() >= 8) {
        b.putLong(r.nextLong());
      }
      out.add(b.flip());
    }
    return out;
  }

  private static String fileSystem(Path dir) {
    try {
      return Files.getFileStore(dir).type();
    } catch (IOException e) {
      return "unknown file system";
    }
  }

  private static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (var walk = Files.walk(dir)) {
      for (Path p : walk.sorted(Collections.reverseOrder()).toList()) {
        Files.delete(p);
      }
    }
  }
}
