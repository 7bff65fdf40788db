package dev.thaw.examples.gpt2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.gpt2.kernels.Fp16;
import dev.thaw.examples.safetensors.DType;
import dev.thaw.examples.safetensors.SafetensorsFile;
import dev.thaw.examples.safetensors.SafetensorsWriter;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class HfCheckpointTest {

  @TempDir Path dir;

  private static final Gpt2Config TINY = Gpt2Config.named("tiny");

  private static ByteBuffer halves(Gpt2Weights w, Gpt2Tensor t) throws IOException {
    ByteBuffer b = ByteBuffer.allocate((int) t.halfBytes()).order(ByteOrder.LITTLE_ENDIAN);
    w.read(t, 0, b);
    return b.flip();
  }

  /** A checkpoint of seeded tiny weights, each tensor renamed / reshaped / retyped by {@code edit}. */
  private Path checkpoint(String prefix, DType dtype, UnaryOperator<String> rename, String reshape,
      long[] shape, boolean withLmHead) throws IOException {
    Path d = Files.createTempDirectory(dir, "ckpt");
    Files.writeString(d.resolve("config.json"), new ObjectMapper().writeValueAsString(TINY.toHuggingFace()));
    SeededWeights seeded = new SeededWeights(TINY, 5);
    SafetensorsWriter w = new SafetensorsWriter();
    for (Gpt2Tensor t : Gpt2Tensor.all(TINY)) {
      ByteBuffer h = halves(seeded, t);
      String name = rename.apply(prefix + t.name());
      if (name == null) {
        continue;
      }
      long[] s = t.name().equals(reshape) ? shape : t.shape();
      if (dtype == DType.F32) {
        ByteBuffer f = ByteBuffer.allocate(2 * h.remaining()).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < h.remaining() / 2; i++) {
          f.putFloat(Fp16.toFloat(h.getShort(2 * i)));
        }
        w.add(name, DType.F32, s, f.flip());
      } else if (dtype == DType.I16) {
        w.add(name, DType.I16, s, h);
      } else {
        w.add(name, DType.F16, s, t.name().equals(reshape) ? ByteBuffer.allocate(2 * (int) product(shape)) : h);
      }
    }
    if (withLmHead) {
      w.add("lm_head.weight", DType.F16, new long[] {97, 64}, ByteBuffer.allocate(97 * 64 * 2));
    }
    w.write(d.resolve("model.safetensors"));
    return d;
  }

  private static long product(long[] s) {
    long n = 1;
    for (long d : s) {
      n *= d;
    }
    return n;
  }

  @Test
  void savedSeededWeightsReadBackBitForBitWithEitherPrefix() throws IOException {
    SeededWeights seeded = new SeededWeights(TINY, 5);
    for (String prefix : new String[] {"transformer.", ""}) {
      Path d = checkpoint(prefix, DType.F16, n -> n, null, null, true);
      try (HfCheckpoint ckpt = HfCheckpoint.open(d)) {
        assertEquals(List.of("lm_head.weight"), ckpt.ignored());
        for (Gpt2Tensor t : Gpt2Tensor.all(TINY)) {
          assertEquals(halves(seeded, t), halves(ckpt, t), t.name());
        }
      }
    }
  }

  @Test
  void f32AndBf16TensorsAreRoundedToFp16() throws IOException {
    SeededWeights seeded = new SeededWeights(TINY, 5);
    try (HfCheckpoint ckpt = HfCheckpoint.open(checkpoint("", DType.F32, n -> n, null, null, false))) {
      Gpt2Tensor wte = Gpt2Tensor.all(TINY).get(0);
      assertEquals(DType.F32, ckpt.storedType(wte));
      assertEquals(halves(seeded, wte), halves(ckpt, wte));
      // A part in the middle: offsets are in fp16 bytes whatever the stored type.
      ByteBuffer part = ByteBuffer.allocate(10).order(ByteOrder.LITTLE_ENDIAN);
      ckpt.read(wte, 1000, part);
      assertEquals(halves(seeded, wte).getShort(1002), part.getShort(2));
    }
    // BF16: 1.5 is 0x3FC0 there and 0x3E00 in fp16; -0.25 is 0xBE80 and 0xB400.
    Path d = checkpoint("", DType.F16, n -> n.equals("ln_f.weight") ? null : n, null, null, false);
    Path file = d.resolve("model.safetensors");
    rewriteWithExtra(file, "ln_f.weight", DType.BF16, new long[] {64}, bf16Pattern());
    try (HfCheckpoint ckpt = HfCheckpoint.open(d)) {
      Gpt2Tensor lnf = Gpt2Tensor.all(TINY).get(Gpt2Tensor.all(TINY).size() - 2);
      ByteBuffer h = halves(ckpt, lnf);
      assertEquals((short) 0x3E00, h.getShort(0));
      assertEquals((short) 0xB400, h.getShort(2));
    }
  }

  private static ByteBuffer bf16Pattern() {
    ByteBuffer b = ByteBuffer.allocate(128).order(ByteOrder.LITTLE_ENDIAN);
    for (int i = 0; i < 64; i++) {
      b.putShort(i % 2 == 0 ? (short) 0x3FC0 : (short) 0xBE80);
    }
    return b.flip();
  }

  /** Copies every tensor of {@code file} and adds one more. */
  private static void rewriteWithExtra(Path file, String name, DType dtype, long[] shape, ByteBuffer data)
      throws IOException {
    SafetensorsWriter w = new SafetensorsWriter();
    try (var in = SafetensorsFile.open(file)) {
      for (var t : in.tensors().values()) {
        w.add(t.name(), t.dtype(), t.dims(), in.readDirect(t));
      }
      w.add(name, dtype, shape, data);
      w.write(file.resolveSibling("next.safetensors"));
    }
    Files.move(file.resolveSibling("next.safetensors"), file, StandardCopyOption.REPLACE_EXISTING);
  }

  private String refusal(Path d) {
    return assertThrows(InvalidConfigException.class, () -> HfCheckpoint.open(d).close()).getMessage();
  }

  @Test
  void aShapeMismatchNamesTheTensorAndBothShapes() throws IOException {
    Path d = checkpoint("transformer.", DType.F16, n -> n, "h.1.attn.c_attn.weight", new long[] {64, 190}, false);
    String m = refusal(d);
    assertTrue(m.contains("'transformer.h.1.attn.c_attn.weight' has shape [64, 190] but the config needs "
        + "[64, 192]"), m);
  }

  @Test
  void missingWrongTypedAmbiguousOrCorruptTensorsAreRefused() throws IOException {
    String missing = refusal(checkpoint("", DType.F16, n -> n.equals("h.0.mlp.c_fc.bias") ? null : n, null, null,
        false));
    assertTrue(missing.contains("'h.0.mlp.c_fc.bias' is missing (expected shape [256])"), missing);
    String typed = refusal(checkpoint("", DType.I16, n -> n, null, null, false));
    assertTrue(typed.contains("'wte.weight' is I16; F16, BF16 or F32 expected"), typed);

    Path both = checkpoint("", DType.F16, n -> n, null, null, false);
    rewriteWithExtra(both.resolve("model.safetensors"), "transformer.wpe.weight", DType.F16, new long[] {64, 64},
        ByteBuffer.allocate(64 * 64 * 2));
    assertTrue(refusal(both).contains("both 'wpe.weight' and 'transformer.wpe.weight'"));

    Path corrupt = checkpoint("", DType.F16, n -> n, null, null, false);
    Files.write(corrupt.resolve("model.safetensors"), new byte[] {(byte) 0xFF, 0, 0, 0, 0, 0, 0, 0, '{', '}'});
    assertTrue(refusal(corrupt).contains("declares a header of 255 bytes"));

    Path noWeights = checkpoint("", DType.F16, n -> n, null, null, false);
    Files.delete(noWeights.resolve("model.safetensors"));
    Files.writeString(noWeights.resolve("model.safetensors.index.json"), "{}");
    assertTrue(refusal(noWeights).contains("sharded checkpoints are not supported"));
  }

  @Test
  void aConfigThatDisagreesWithTheFileNamesTheFirstMissingTensor() throws IOException {
    Path d = checkpoint("", DType.F16, n -> n, null, null, false);
    Files.writeString(d.resolve("config.json"),
        TINY.toHuggingFace().put("n_layer", 3).toString());
    assertTrue(refusal(d).contains("'h.2.ln_1.weight' is missing"));
  }
}
