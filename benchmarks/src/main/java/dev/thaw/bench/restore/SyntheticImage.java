package dev.thaw.bench.restore;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.thaw.image.ImageManifest;
import dev.thaw.image.restore.RestoreSource;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuStream;
import dev.thaw.runtime.gpu.PinnedBuffer;
import dev.thaw.runtime.gpu.VirtualRange;
import java.nio.ByteBuffer;
import java.nio.LongBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * A model-shaped image made, not built: the tensors of GPT-2-large or of Llama-3.1-8B (the weights read-only, a tail of
 * written buffers standing for activations and the KV cache), packed 256-byte aligned at addresses free in this
 * process, cut into fixed-size chunks of random bytes held in one pinned host buffer laid out in restore order, as the
 * host cache lays an image out. Chunk names are random, not hashes: the harness checks the device bytes against the
 * host buffer itself ({@link #verify}).
 */
final class SyntheticImage implements AutoCloseable {

  static final int CHUNK_BYTES = 2 << 20;
  private static final long ALIGN = 256;

  private final String shape;
  private final ImageManifest manifest;
  private final PinnedBuffer host;
  private final Map<Digest, Long> at;

  private SyntheticImage(String shape, ImageManifest manifest, PinnedBuffer host, Map<Digest, Long> at) {
    this.shape = shape;
    this.manifest = manifest;
    this.host = host;
    this.at = at;
  }

  /** The tensor sizes of a shape, weights first, then the written tail; names are {@code w.<i>} and {@code rw.<i>}. */
  static long[][] sizes(String shape) {
    List<Long> weights = new ArrayList<>();
    List<Long> written = new ArrayList<>();
    switch (shape) {
      case "gpt2-large" -> {
        long d = 1280;
        weights.add(50257 * d * 2);
        weights.add(1024 * d * 2);
        for (int l = 0; l < 36; l++) {
          for (long n : new long[] {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d}) {
            weights.add(n * 2);
          }
        }
        weights.add(d * 2);
        weights.add(d * 2);
        // 14.7 MB written: a 64-token KV cache per layer and activations.
        for (int l = 0; l < 72; l++) {
          written.add(64 * d * 2);
        }
        for (int i = 0; i < 10; i++) {
          written.add(288L << 10);
        }
      }
      case "llama-8b" -> {
        long d = 4096;
        long kv = 1024;
        long ff = 14336;
        long vocab = 128256;
        weights.add(vocab * d * 2);
        for (int l = 0; l < 32; l++) {
          for (long n : new long[] {d, d * d, kv * d, kv * d, d * d, d, ff * d, ff * d, d * ff}) {
            weights.add(n * 2);
          }
        }
        weights.add(d * 2);
        weights.add(vocab * d * 2);
        for (int l = 0; l < 64; l++) {
          written.add(256L << 10);
        }
      }
      case "tiny" -> {
        // For dry runs on the sim device: 24 MiB of weights in 1 MiB tensors, 1 MiB written.
        for (int i = 0; i < 24; i++) {
          weights.add(1L << 20);
        }
        for (int i = 0; i < 4; i++) {
          written.add(256L << 10);
        }
      }
      default -> throw new IllegalArgumentException("no shape '" + shape + "'; gpt2-large, llama-8b or tiny");
    }
    return new long[][] {weights.stream().mapToLong(Long::longValue).toArray(),
        written.stream().mapToLong(Long::longValue).toArray()};
  }

  /** Lays the shape out at addresses free in {@code context}'s process now and fills its host buffer, on all cores. */
  static SyntheticImage create(GpuContext context, String shape, long seed) throws Exception {
    long[][] s = sizes(shape);
    long total = 0;
    for (long[] group : s) {
      for (long n : group) {
        total += (n + ALIGN - 1) / ALIGN * ALIGN;
      }
    }
    long base;
    try (VirtualRange free = context.reserve(total, 0)) {
      base = free.address();
    }
    SplittableRandom names = new SplittableRandom(seed);
    byte[] raw = new byte[32];
    List<ImageManifest.Allocation> allocations = new ArrayList<>();
    List<String> order = new ArrayList<>();
    List<String> written = new ArrayList<>();
    Map<Digest, Long> at = new HashMap<>();
    long device = base;
    long hostAt = 0;
    for (int g = 0; g < 2; g++) {
      for (int i = 0; i < s[g].length; i++) {
        long size = s[g][i];
        String name = (g == 0 ? "w." : "rw.") + i;
        List<ImageManifest.Chunk> chunks = new ArrayList<>();
        for (long off = 0; off < size; off += CHUNK_BYTES) {
          int len = (int) Math.min(CHUNK_BYTES, size - off);
          names.nextBytes(raw);
          Digest d = Digest.fromBytes(raw);
          chunks.add(new ImageManifest.Chunk(d, off, len));
          at.put(d, hostAt);
          hostAt += len;
        }
        allocations.add(new ImageManifest.Allocation(name, device, size, chunks));
        order.add(name);
        if (g == 1) {
          written.add(name);
        }
        device += (size + ALIGN - 1) / ALIGN * ALIGN;
      }
    }
    ImageManifest manifest = new ImageManifest(ImageManifest.SCHEMA_VERSION,
        new ImageManifest.Function(SyntheticWeightsFunction.class.getName(), JsonNodeFactory.instance.objectNode()),
        new ImageManifest.Device(context.device().name(), "0.0", "sm_00", "synthetic"), allocations, List.of(),
        JsonNodeFactory.instance.objectNode(), List.of(),
        new ImageManifest.Build("", "", 0, hostAt, hostAt, at.size()),
        new ImageManifest.Profile("recorded", 0, order, Map.of(), written));
    PinnedBuffer host = context.allocatePinned(hostAt);
    try {
      fill(host, hostAt, seed);
      return new SyntheticImage(shape, manifest, host, at);
    } catch (Exception e) {
      host.close();
      throw e;
    }
  }

  private static void fill(PinnedBuffer host, long bytes, long seed) throws Exception {
    long piece = 256L << 20;
    int threads = Math.max(1, Math.min(16, Runtime.getRuntime().availableProcessors()));
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      List<Future<?>> parts = new ArrayList<>();
      for (long off = 0; off < bytes; off += piece) {
        long from = off;
        int len = (int) Math.min(piece, bytes - off);
        parts.add(pool.submit(() -> {
          SplittableRandom r = new SplittableRandom(seed * 31 + from);
          ByteBuffer b = host.slice(from, len);
          LongBuffer longs = b.asLongBuffer();
          while (longs.hasRemaining()) {
            longs.put(r.nextLong());
          }
          for (int i = len / 8 * 8; i < len; i++) {
            b.put(i, (byte) r.nextInt());
          }
        }));
      }
      for (Future<?> f : parts) {
        f.get();
      }
    } finally {
      pool.shutdownNow();
    }
  }

  /** The same image at {@code base}: its allocations moved, the same chunks (for a second restore at once). */
  ImageManifest at(long base) {
    long shift = base - manifest.allocations().get(0).address();
    List<ImageManifest.Allocation> moved = new ArrayList<>();
    for (ImageManifest.Allocation a : manifest.allocations()) {
      moved.add(new ImageManifest.Allocation(a.name(), a.address() + shift, a.size(), a.chunks()));
    }
    return manifest.withAllocations(moved);
  }

  String shape() {
    return shape;
  }

  ImageManifest manifest() {
    return manifest;
  }

  long bytes() {
    return manifest.totalBytes();
  }

  long readOnlyBytes() {
    return manifest.allocations().stream().filter(a -> a.name().startsWith("w.")).mapToLong(
        ImageManifest.Allocation::size).sum();
  }

  /** The host buffer as a restore's host tier. */
  RestoreSource source() {
    return m -> d -> {
      Long offset = at.get(d);
      return offset == null ? null : new RestoreSource.HostChunk(host, offset);
    };
  }

  /**
   * Compares every byte of {@code m}'s allocations on {@code context}'s device with the host buffer (through pinned
   * staging of {@code staging.size()} bytes); returns the first difference, or null when all are equal.
   */
  String verify(GpuContext context, ImageManifest m, PinnedBuffer staging) {
    try (GpuStream s = context.createStream()) {
      int piece = (int) Math.min(staging.size(), 1L << 30);
      for (ImageManifest.Allocation a : m.allocations()) {
        for (ImageManifest.Chunk c : a.chunks()) {
          // Chunks are at most CHUNK_BYTES: several fit one staging piece; copy them one by one, compare at once.
          if (c.length() > piece) {
            throw new IllegalStateException("staging smaller than a chunk");
          }
        }
        long done = 0;
        List<ImageManifest.Chunk> chunks = a.chunks();
        int next = 0;
        while (next < chunks.size()) {
          long from = chunks.get(next).offset();
          int last = next;
          while (last + 1 < chunks.size() && chunks.get(last + 1).offset() + chunks.get(last + 1).length() - from
              <= piece) {
            last++;
          }
          long len = chunks.get(last).offset() + chunks.get(last).length() - from;
          s.copyDeviceToHostAsync(staging, 0, a.address() + from, len);
          s.synchronize();
          for (int k = next; k <= last; k++) {
            ImageManifest.Chunk c = chunks.get(k);
            ByteBuffer got = staging.slice(c.offset() - from, c.length());
            ByteBuffer want = host.slice(at.get(c.digest()), c.length());
            int mismatch = got.mismatch(want);
            if (mismatch >= 0) {
              return String.format("%s at byte %d of %d: device 0x%02x, image 0x%02x", a.name(),
                  c.offset() + mismatch, a.size(), got.get(mismatch), want.get(mismatch));
            }
          }
          done += len;
          next = last + 1;
        }
      }
      return null;
    }
  }

  @Override
  public void close() {
    host.close();
  }
}
