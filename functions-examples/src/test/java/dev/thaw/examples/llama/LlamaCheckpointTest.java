package dev.thaw.examples.llama;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.runtime.function.InvalidConfigException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Hugging Face directories, single-file and sharded, and every way one can be wrong. */
class LlamaCheckpointTest {

  private static final ObjectMapper JSON = new ObjectMapper();

  @TempDir Path dir;

  private static void assertRefused(Path dir, String says) {
    InvalidConfigException e = assertThrows(InvalidConfigException.class, () -> LlamaCheckpoint.open(dir));
    assertTrue(e.getMessage().contains(says), () -> "expected '" + says + "' in: " + e.getMessage());
  }

  @Test
  void readsBackWhatWasSavedSingleOrSharded() throws Exception {
    SeededLlamaWeights w = new SeededLlamaWeights(LlamaConfig.named("tiny-qwen2"), 5);
    for (int shards : new int[] {1, 4}) {
      Path d = dir.resolve("s" + shards);
      LlamaCheckpoint.save(w, d, shards);
      try (LlamaCheckpoint c = LlamaCheckpoint.open(d)) {
        assertEquals(HalfType.BF16, c.config().type());
        assertEquals(List.of(), c.ignored());
        for (LlamaTensor t : LlamaTensor.all(w.config())) {
          ByteBuffer expected = ByteBuffer.allocate((int) t.bytes());
          w.read(t, 0, expected);
          ByteBuffer got = ByteBuffer.allocate((int) t.bytes());
          c.read(t, 0, got);
          assertEquals(expected.flip(), got.flip(), t.name());
        }
      }
      assertEquals(shards > 1, Files.exists(d.resolve(LlamaCheckpoint.INDEX_FILE)));
    }
  }

  @Test
  void refusesAMissingShardATensorMissingAWrongDtypeOrShape() throws Exception {
    LlamaConfig tiny = LlamaConfig.named("tiny");
    LlamaCheckpoint.save(new SeededLlamaWeights(tiny, 1), dir, 3);
    Files.delete(dir.resolve("model-00002-of-00003.safetensors"));
    assertRefused(dir, "model-00002-of-00003.safetensors does not exist");

    Path fp16 = dir.resolve("fp16");
    LlamaCheckpoint.save(new SeededLlamaWeights(tiny.withType(HalfType.FP16), 1), fp16, 1);
    ObjectNode config = (ObjectNode) JSON.readTree(fp16.resolve("config.json").toFile());
    config.put("torch_dtype", "bfloat16");
    JSON.writeValue(fp16.resolve("config.json").toFile(), config);
    assertRefused(fp16, "is F16 but the model is bfloat16");

    Path shape = dir.resolve("shape");
    LlamaCheckpoint.save(new SeededLlamaWeights(tiny, 1), shape, 1);
    config = (ObjectNode) JSON.readTree(shape.resolve("config.json").toFile());
    config.put("intermediate_size", 160);
    JSON.writeValue(shape.resolve("config.json").toFile(), config);
    assertRefused(shape, "'model.layers.0.mlp.gate_proj.weight' has shape [128, 64] but the config needs [160, 64]");

    Path layers = dir.resolve("layers");
    LlamaCheckpoint.save(new SeededLlamaWeights(tiny, 1), layers, 1);
    config = (ObjectNode) JSON.readTree(layers.resolve("config.json").toFile());
    config.put("num_hidden_layers", 3);
    JSON.writeValue(layers.resolve("config.json").toFile(), config);
    assertRefused(layers, "tensor 'model.layers.2.input_layernorm.weight' is missing");

    Path none = dir.resolve("none");
    Files.createDirectories(none);
    Files.writeString(none.resolve("config.json"), tiny.toHuggingFace().toString());
    assertRefused(none, "model.safetensors does not exist");
  }

  @Test
  void refusesAnIndexThatPointsOutsideTheDirectory() throws Exception {
    LlamaCheckpoint.save(new SeededLlamaWeights(LlamaConfig.named("tiny"), 1), dir, 2);
    Path index = dir.resolve(LlamaCheckpoint.INDEX_FILE);
    String text = Files.readString(index).replaceFirst("model-00001-of-00002.safetensors",
        "../../etc/passwd");
    Files.writeString(index, text);
    assertRefused(dir, "not a file name in");
    Files.writeString(index, "{\"metadata\": {}}");
    assertRefused(dir, "has no 'weight_map'");
  }

  @Test
  void refusesLyingSafetensorsHeaders() throws Exception {
    LlamaCheckpoint.save(new SeededLlamaWeights(LlamaConfig.named("tiny"), 1), dir, 1);
    Path file = dir.resolve(LlamaCheckpoint.WEIGHTS_FILE);
    long size = Files.size(file);
    // A file cut short: the header's offsets now run past the data.
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
      ch.truncate(size - 100);
    }
    assertThrows(InvalidConfigException.class, () -> LlamaCheckpoint.open(dir));
    // A header length beyond the file.
    ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, size * 2);
    try (FileChannel ch = FileChannel.open(file, StandardOpenOption.WRITE)) {
      ch.write(len, 0);
    }
    assertThrows(InvalidConfigException.class, () -> LlamaCheckpoint.open(dir));
    Files.write(file, "not safetensors".getBytes(StandardCharsets.UTF_8));
    assertThrows(InvalidConfigException.class, () -> LlamaCheckpoint.open(dir));
  }
}
