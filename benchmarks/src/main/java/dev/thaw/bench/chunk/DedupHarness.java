package dev.thaw.bench.chunk;

import dev.thaw.image.chunk.FastCdc;
import dev.thaw.image.chunk.FastCdcOptions;
import dev.thaw.image.store.Digest;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;

/**
 * How much a second image of a model costs to store, per chunk size: a GPT-2-small-shaped set of fp16
 * weights (124 M parameters, 248 MB) as the base image, and variants that share most of it. For each
 * variant and average chunk size it prints the bytes the variant adds to a store that holds the base (the
 * chunks it has that the base has not), next to the bytes that really differ.
 *
 * <p>Two memory layouts: {@code per-tensor} (each tensor its own allocation, chunked on its own: what Thaw
 * records when a function allocates per tensor) and {@code arena} (all tensors packed into one allocation,
 * 256-byte aligned, chunked as one stream: a framework's caching allocator). Results:
 * {@code docs/benchmarks/chunking.md}. Run: {@code java -cp <classpath> dev.thaw.bench.chunk.DedupHarness
 * [layers]}.
 */
public final class DedupHarness {

  record Tensor(String name, long elements) {}

  public static void main(String[] args) {
    int layers = args.length > 0 ? Integer.parseInt(args[0]) : 12;
    List<Tensor> model = gpt2(layers);
    long params = model.stream().mapToLong(Tensor::elements).sum();
    System.out.printf("model: GPT-2-small shape, %d layers, %d tensors, %.1f M params, %.1f MB fp16%n",
        layers, model.size(), params / 1e6, params * 2 / 1e6);

    Map<String, ByteBuffer> base = weights(model, Map.of(), null);
    Map<String, Map<String, ByteBuffer>> variants = new LinkedHashMap<>();
    // A fine-tune of the last block and the final norm (the usual "new head").
    Map<String, Long> head = new LinkedHashMap<>();
    for (Tensor t : model) {
      if (t.name().startsWith("h" + (layers - 1) + ".") || t.name().startsWith("ln_f")) {
        head.put(t.name(), 2L);
      }
    }
    variants.put("last-block", weights(model, head, base));
    // A few tensors changed across the model (a merged LoRA on some projections).
    variants.put("4-tensors", weights(model, Map.of("h2.attn.c_attn.w", 3L, "h5.mlp.c_fc.w", 3L,
        "h8.attn.c_proj.w", 3L, "h10.ln_1.w", 3L), base));
    // 16 bytes inserted early in a tensor of block 0 (a changed shape or header): everything after shifts.
    Map<String, ByteBuffer> inserted = new LinkedHashMap<>(base);
    ByteBuffer victim = base.get("h0.attn.c_attn.w");
    ByteBuffer grown = ByteBuffer.allocateDirect(victim.capacity() + 16);
    grown.put(victim.duplicate().limit(4096)).put(new byte[16]).put(victim.duplicate().position(4096)).flip();
    inserted.put("h0.attn.c_attn.w", grown);
    variants.put("insert-16B", inserted);

    System.out.println();
    System.out.println("layout | avg | base chunks | mean chunk | variant | changed MB | added MB | added/changed");
    for (String layout : List.of("per-tensor", "arena")) {
      for (int avg = 64 << 10; avg <= 4 << 20; avg <<= 1) {
        FastCdcOptions o = FastCdcOptions.ofAverage(avg);
        Map<Digest, Integer> baseChunks = chunk(base, layout, o);
        long baseBytes = baseChunks.values().stream().mapToLong(Integer::longValue).sum();
        for (var v : variants.entrySet()) {
          Map<Digest, Integer> vc = chunk(v.getValue(), layout, o);
          long added = 0;
          for (var e : vc.entrySet()) {
            if (!baseChunks.containsKey(e.getKey())) {
              added += e.getValue();
            }
          }
          long changed = changedBytes(base, v.getValue());
          System.out.printf("%s | %d KiB | %d | %.0f KiB | %s | %.1f | %.1f | %.2f%n", layout, avg >> 10,
              baseChunks.size(), baseBytes / 1024.0 / baseChunks.size(), v.getKey(), changed / 1e6, added / 1e6,
              (double) added / changed);
        }
      }
    }
  }

  static List<Tensor> gpt2(int layers) {
    int d = 768;
    List<Tensor> t = new ArrayList<>();
    t.add(new Tensor("wte", 50257L * d));
    t.add(new Tensor("wpe", 1024L * d));
    for (int i = 0; i < layers; i++) {
      String p = "h" + i + ".";
      t.add(new Tensor(p + "ln_1.w", d));
      t.add(new Tensor(p + "ln_1.b", d));
      t.add(new Tensor(p + "attn.c_attn.w", (long) d * 3 * d));
      t.add(new Tensor(p + "attn.c_attn.b", 3L * d));
      t.add(new Tensor(p + "attn.c_proj.w", (long) d * d));
      t.add(new Tensor(p + "attn.c_proj.b", d));
      t.add(new Tensor(p + "ln_2.w", d));
      t.add(new Tensor(p + "ln_2.b", d));
      t.add(new Tensor(p + "mlp.c_fc.w", (long) d * 4 * d));
      t.add(new Tensor(p + "mlp.c_fc.b", 4L * d));
      t.add(new Tensor(p + "mlp.c_proj.w", (long) 4 * d * d));
      t.add(new Tensor(p + "mlp.c_proj.b", d));
    }
    t.add(new Tensor("ln_f.w", d));
    t.add(new Tensor("ln_f.b", d));
    return t;
  }

  /** Seeded fp16 weights, N(0, ~0.02)-like: random sign and mantissa, exponent 2^-9 .. 2^-4. */
  static Map<String, ByteBuffer> weights(List<Tensor> model, Map<String, Long> seedOverride,
      Map<String, ByteBuffer> base) {
    Map<String, ByteBuffer> out = new LinkedHashMap<>();
    for (Tensor t : model) {
      if (base != null && !seedOverride.containsKey(t.name())) {
        out.put(t.name(), base.get(t.name())); // shared, not regenerated
        continue;
      }
      long s = seedOverride.getOrDefault(t.name(), 1L) * 1_000_003L + t.name().hashCode();
      SplittableRandom r = new SplittableRandom(s);
      ByteBuffer b = ByteBuffer.allocateDirect((int) (t.elements() * 2));
      while (b.remaining() >= 8) {
        long x = r.nextLong();
        for (int k = 0; k < 4; k++) {
          int bits = (int) (x >>> (16 * k));
          short h = (short) ((bits & 0x83FF) | ((6 + ((bits >>> 10) & 0x7) % 6) << 10));
          b.putShort(h);
        }
      }
      while (b.hasRemaining()) {
        b.put((byte) r.nextInt());
      }
      out.put(t.name(), b.flip());
    }
    return out;
  }

  static Map<Digest, Integer> chunk(Map<String, ByteBuffer> tensors, String layout, FastCdcOptions o) {
    Map<Digest, Integer> out = new LinkedHashMap<>();
    MessageDigest sha = Digest.sha256();
    FastCdc c = new FastCdc(o);
    if (layout.equals("per-tensor")) {
      for (ByteBuffer t : tensors.values()) {
        FastCdc.Sink sink = (off, len) -> {
          sha.update(t.duplicate().position((int) off).limit((int) off + len));
          out.put(Digest.fromBytes(sha.digest()), len);
        };
        c.update(t, sink);
        c.finish(sink);
      }
    } else {
      long total = 0;
      for (ByteBuffer t : tensors.values()) {
        total += (t.capacity() + 255) & ~255L;
      }
      ByteBuffer arena = ByteBuffer.allocateDirect((int) total);
      for (ByteBuffer t : tensors.values()) {
        int start = arena.position();
        arena.put(t.duplicate());
        arena.position(start + ((t.capacity() + 255) & ~255));
      }
      arena.clear();
      FastCdc.Sink sink = (off, len) -> {
        sha.update(arena.duplicate().position((int) off).limit((int) off + len));
        out.put(Digest.fromBytes(sha.digest()), len);
      };
      c.update(arena, sink);
      c.finish(sink);
    }
    return out;
  }

  /** Bytes of tensors that differ from the base (whole tensors: how weights change). */
  static long changedBytes(Map<String, ByteBuffer> base, Map<String, ByteBuffer> v) {
    long n = 0;
    for (var e : v.entrySet()) {
      if (!e.getValue().equals(base.get(e.getKey()))) {
        n += e.getValue().capacity();
      }
    }
    return n;
  }

  static Set<String> names(List<Tensor> model) {
    Set<String> s = new HashSet<>();
    model.forEach(t -> s.add(t.name()));
    return s;
  }
}
