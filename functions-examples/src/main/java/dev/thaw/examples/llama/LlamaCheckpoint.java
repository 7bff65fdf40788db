package dev.thaw.examples.llama;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.examples.llama.kernels.HalfType;
import dev.thaw.examples.safetensors.DType;
import dev.thaw.examples.safetensors.SafetensorsException;
import dev.thaw.examples.safetensors.SafetensorsFile;
import dev.thaw.examples.safetensors.SafetensorsWriter;
import dev.thaw.examples.safetensors.TensorInfo;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Llama-family weights from a Hugging Face directory as {@code save_pretrained} writes it: {@code config.json}
 * and either one {@code model.safetensors} or shards listed by {@code model.safetensors.index.json}.
 *
 * <p>{@link #open} checks everything before a byte of weights is read: the config ({@link LlamaConfig}), that
 * every shard the index names exists and is valid safetensors (a lying header is refused by
 * {@link SafetensorsFile}), and that every tensor of {@link LlamaTensor#all} is present where the index says, in
 * the config's dtype, with the config's shape. Each failure is an {@link InvalidConfigException} naming the file
 * and tensor. A config without a dtype takes the embedding's. Tensors the model does not use (a tied
 * {@code lm_head.weight}, rotary buffers) are listed in {@link #ignored()}.
 */
public final class LlamaCheckpoint implements LlamaWeights {

  public static final String CONFIG_FILE = "config.json";
  public static final String WEIGHTS_FILE = "model.safetensors";
  public static final String INDEX_FILE = "model.safetensors.index.json";

  private final Path dir;
  private final LlamaConfig config;
  private final List<SafetensorsFile> files;
  private final Map<String, TensorInfo> infos;
  private final Map<String, SafetensorsFile> fileOf;
  private final List<String> ignored;

  private LlamaCheckpoint(Path dir, LlamaConfig config, List<SafetensorsFile> files, Map<String, TensorInfo> infos,
      Map<String, SafetensorsFile> fileOf, List<String> ignored) {
    this.dir = dir;
    this.config = config;
    this.files = files;
    this.infos = infos;
    this.fileOf = fileOf;
    this.ignored = ignored;
  }

  /**
   * Opens {@code dir} and checks it against its own {@code config.json}.
   *
   * @throws InvalidConfigException if the config, a shard or a tensor does not fit
   * @throws IOException if the files cannot be read
   */
  public static LlamaCheckpoint open(Path dir) throws IOException {
    LlamaConfig config = LlamaConfig.fromDirectory(dir);
    Map<String, String> shardOf = shardMap(dir);
    List<SafetensorsFile> files = new ArrayList<>();
    try {
      Map<String, SafetensorsFile> byShard = new LinkedHashMap<>();
      for (String shard : new TreeSet<>(shardOf.values())) {
        Path p = dir.resolve(shard);
        if (!Files.isRegularFile(p)) {
          throw new InvalidConfigException(p + " does not exist (" + INDEX_FILE + " lists it for "
              + firstTensorOf(shardOf, shard) + ")");
        }
        try {
          SafetensorsFile f = SafetensorsFile.open(p);
          files.add(f);
          byShard.put(shard, f);
        } catch (SafetensorsException e) {
          throw new InvalidConfigException(e.getMessage(), e);
        }
      }
      if (config.type() == null) {
        String embed = "model.embed_tokens.weight";
        TensorInfo e = shardOf.containsKey(embed) ? byShard.get(shardOf.get(embed)).tensors().get(embed) : null;
        if (e == null || (e.dtype() != DType.BF16 && e.dtype() != DType.F16)) {
          throw new InvalidConfigException("config.json names no torch_dtype and " + embed + " is "
              + (e == null ? "missing" : e.dtype()) + ": cannot tell bfloat16 from float16");
        }
        config = config.withType(e.dtype() == DType.BF16 ? HalfType.BF16 : HalfType.FP16).validate();
      }
      Map<String, TensorInfo> infos = new LinkedHashMap<>();
      Map<String, SafetensorsFile> fileOf = new LinkedHashMap<>();
      for (LlamaTensor t : LlamaTensor.all(config)) {
        String shard = shardOf.get(t.name());
        SafetensorsFile f = shard == null ? null : byShard.get(shard);
        TensorInfo info = f == null ? null : f.tensors().get(t.name());
        if (info == null) {
          throw new InvalidConfigException(dir + ": tensor '" + t.name() + "' is missing"
              + (shard == null ? "" : " from " + shard) + " (expected shape " + t.shapeString() + ")");
        }
        if (info.dtype() != config.type().dtype()) {
          throw new InvalidConfigException(f.path() + ": tensor '" + t.name() + "' is " + info.dtype()
              + " but the model is " + config.type().torchName() + " (" + config.type().dtype()
              + "): mixed dtypes are not supported");
        }
        if (!info.hasShape(t.shape())) {
          throw new InvalidConfigException(f.path() + ": tensor '" + t.name() + "' has shape " + info.shape()
              + " but the config needs " + t.shapeString());
        }
        infos.put(t.name(), info);
        fileOf.put(t.name(), f);
      }
      List<String> ignored = new ArrayList<>();
      for (SafetensorsFile f : files) {
        for (String name : f.tensors().keySet()) {
          if (!infos.containsKey(name)) {
            ignored.add(name);
          }
        }
      }
      return new LlamaCheckpoint(dir, config, List.copyOf(files), infos, fileOf, List.copyOf(ignored));
    } catch (RuntimeException | IOException e) {
      for (SafetensorsFile f : files) {
        f.close();
      }
      throw e;
    }
  }

  /** Tensor name to shard file name: from the index if there is one, else every tensor in model.safetensors. */
  private static Map<String, String> shardMap(Path dir) throws IOException {
    Path single = dir.resolve(WEIGHTS_FILE);
    Path index = dir.resolve(INDEX_FILE);
    if (!Files.isRegularFile(index)) {
      if (!Files.isRegularFile(single)) {
        throw new InvalidConfigException(single + " does not exist (nor " + INDEX_FILE + ")");
      }
      Map<String, String> all = new TreeMap<>();
      try (SafetensorsFile f = SafetensorsFile.open(single)) {
        for (String name : f.tensors().keySet()) {
          all.put(name, WEIGHTS_FILE);
        }
      } catch (SafetensorsException e) {
        throw new InvalidConfigException(e.getMessage(), e);
      }
      return all;
    }
    JsonNode json;
    try {
      json = new ObjectMapper().readTree(index.toFile());
    } catch (IOException e) {
      throw new InvalidConfigException(index + " is not JSON: " + e.getMessage(), e);
    }
    JsonNode map = json == null ? null : json.get("weight_map");
    if (map == null || !map.isObject()) {
      throw new InvalidConfigException(index + " has no 'weight_map' object");
    }
    Map<String, String> out = new TreeMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = map.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      String file = e.getValue().asText("");
      // A shard is a file of this directory: no separators, no '..', nothing that reaches elsewhere.
      if (!e.getValue().isTextual() || file.isEmpty() || file.contains("/") || file.contains("\\")
          || file.equals(".") || file.equals("..")) {
        throw new InvalidConfigException(index + ": tensor '" + e.getKey() + "' maps to " + e.getValue()
            + ", not a file name in " + dir);
      }
      out.put(e.getKey(), file);
    }
    return out;
  }

  private static String firstTensorOf(Map<String, String> shardOf, String shard) {
    return shardOf.entrySet().stream().filter(e -> e.getValue().equals(shard)).map(Map.Entry::getKey).findFirst()
        .map(n -> "'" + n + "'").orElse("tensors");
  }

  @Override
  public LlamaConfig config() {
    return config;
  }

  @Override
  public String describe() {
    return dir.toString();
  }

  /** Tensors in the files that the model does not use. */
  public List<String> ignored() {
    return ignored;
  }

  @Override
  public void read(LlamaTensor tensor, long offset, ByteBuffer dst) throws IOException {
    TensorInfo info = infos.get(tensor.name());
    if (info == null) {
      throw new IllegalArgumentException(tensor + " is not a tensor of this checkpoint");
    }
    fileOf.get(tensor.name()).read(info, offset, dst);
  }

  /**
   * Writes {@code weights} as a Hugging Face directory: {@code config.json} and the tensors in the config's
   * dtype, in one {@code model.safetensors} when {@code shards} is 1, else in that many
   * {@code model-0000i-of-0000n.safetensors} with an index (tensors dealt out in order).
   */
  public static void save(LlamaWeights weights, Path dir, int shards) throws IOException {
    Files.createDirectories(dir);
    LlamaConfig config = weights.config();
    ObjectMapper json = new ObjectMapper();
    json.writerWithDefaultPrettyPrinter().writeValue(dir.resolve(CONFIG_FILE).toFile(), config.toHuggingFace());
    List<LlamaTensor> all = LlamaTensor.all(config);
    ObjectNode index = json.createObjectNode();
    ObjectNode map = index.putObject("weight_map");
    for (int s = 0; s < shards; s++) {
      String name = shards == 1 ? WEIGHTS_FILE : String.format("model-%05d-of-%05d.safetensors", s + 1, shards);
      SafetensorsWriter writer = new SafetensorsWriter().metadata("format", "pt");
      int from = all.size() * s / shards;
      int to = all.size() * (s + 1) / shards;
      for (LlamaTensor t : all.subList(from, to)) {
        map.put(t.name(), name);
        writer.add(t.name(), config.type().dtype(), t.shape(),
            SafetensorsWriter.streamed(t.bytes(), (at, buf) -> weights.read(t, at, buf)));
      }
      writer.write(dir.resolve(name));
    }
    if (shards > 1) {
      json.writerWithDefaultPrettyPrinter().writeValue(dir.resolve(INDEX_FILE).toFile(), index);
    }
  }

  @Override
  public void close() throws IOException {
    for (SafetensorsFile f : files) {
      f.close();
    }
  }
}
