package dev.thaw.examples.gpt2;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.examples.gpt2.kernels.Fp16;
import dev.thaw.examples.safetensors.DType;
import dev.thaw.examples.safetensors.SafetensorsException;
import dev.thaw.examples.safetensors.SafetensorsFile;
import dev.thaw.examples.safetensors.SafetensorsWriter;
import dev.thaw.examples.safetensors.TensorInfo;
import dev.thaw.runtime.function.InvalidConfigException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * GPT-2 weights from a Hugging Face directory as {@code save_pretrained} writes it: {@code config.json} and one
 * {@code model.safetensors}.
 *
 * <p>Tensor names may carry the {@code transformer.} prefix ({@code GPT2LMHeadModel}) or not
 * ({@code GPT2Model}). {@code lm_head.weight} is tied to {@code wte} and ignored, as are the attention-mask
 * buffers older checkpoints hold ({@code attn.bias}, {@code attn.masked_bias}). F16 is used as stored; F32
 * and BF16 are rounded to fp16 as they are read.
 *
 * <p>{@link #open} checks every tensor against the config before anything is read: missing, ambiguous (with and
 * without prefix), a dtype that is not F16/BF16/F32, or a shape other than the config's is an
 * {@link InvalidConfigException} naming the tensor, and the expected and actual shape.
 */
public final class HfCheckpoint implements Gpt2Weights {

  public static final String CONFIG_FILE = "config.json";
  public static final String WEIGHTS_FILE = "model.safetensors";
  private static final Set<DType> DTYPES = Set.of(DType.F16, DType.BF16, DType.F32);
  /** fp32 elements converted per read of an F32/BF16 tensor: bounds the temporary buffer. */
  private static final int CONVERT_CHUNK = 1 << 20;

  private final Path dir;
  private final Gpt2Config config;
  private final SafetensorsFile file;
  private final Map<String, TensorInfo> byName;
  private final List<String> ignored;

  private HfCheckpoint(Path dir, Gpt2Config config, SafetensorsFile file, Map<String, TensorInfo> byName,
      List<String> ignored) {
    this.dir = dir;
    this.config = config;
    this.file = file;
    this.byName = byName;
    this.ignored = ignored;
  }

  /**
   * Opens {@code dir} and checks it against its own {@code config.json}.
   *
   * @throws InvalidConfigException if the config or a tensor does not fit, or the file is not valid
   *     safetensors (the {@link SafetensorsException} is the cause)
   * @throws IOException if the files cannot be read
   */
  public static HfCheckpoint open(Path dir) throws IOException {
    Gpt2Config config = Gpt2Config.fromDirectory(dir);
    Path weights = dir.resolve(WEIGHTS_FILE);
    if (!Files.isRegularFile(weights)) {
      String why = Files.exists(dir.resolve(WEIGHTS_FILE + ".index.json"))
          ? " (sharded checkpoints are not supported; save with a larger max_shard_size)" : "";
      throw new InvalidConfigException(weights + " does not exist" + why);
    }
    SafetensorsFile file;
    try {
      file = SafetensorsFile.open(weights);
    } catch (SafetensorsException e) {
      throw new InvalidConfigException(e.getMessage(), e);
    }
    try {
      Map<String, TensorInfo> byName = new HashMap<>();
      for (Gpt2Tensor t : Gpt2Tensor.all(config)) {
        TensorInfo plain = file.tensors().get(t.name());
        TensorInfo prefixed = file.tensors().get(Gpt2Tensor.PREFIX + t.name());
        if (plain != null && prefixed != null) {
          throw new InvalidConfigException(weights + ": both '" + t.name() + "' and '" + Gpt2Tensor.PREFIX
              + t.name() + "' are present");
        }
        TensorInfo info = plain != null ? plain : prefixed;
        if (info == null) {
          throw new InvalidConfigException(weights + ": tensor '" + t.name() + "' is missing (expected shape "
              + t.shapeString() + ")");
        }
        if (!DTYPES.contains(info.dtype())) {
          throw new InvalidConfigException(weights + ": tensor '" + info.name() + "' is " + info.dtype()
              + "; F16, BF16 or F32 expected");
        }
        if (!info.hasShape(t.shape())) {
          throw new InvalidConfigException(weights + ": tensor '" + info.name() + "' has shape " + info.shape()
              + " but the config needs " + t.shapeString());
        }
        byName.put(t.name(), info);
      }
      List<String> ignored = new ArrayList<>();
      for (String name : file.tensors().keySet()) {
        String plain = name.startsWith(Gpt2Tensor.PREFIX) ? name.substring(Gpt2Tensor.PREFIX.length()) : name;
        if (!byName.containsKey(plain)) {
          ignored.add(name);
        }
      }
      return new HfCheckpoint(dir, config, file, Map.copyOf(byName), List.copyOf(ignored));
    } catch (RuntimeException e) {
      file.close();
      throw e;
    }
  }

  @Override
  public Gpt2Config config() {
    return config;
  }

  @Override
  public String describe() {
    return dir.toString();
  }

  /** Tensors in the file that are not weights of the model (the tied {@code lm_head.weight}, mask buffers). */
  public List<String> ignored() {
    return ignored;
  }

  /** The dtype the file stores {@code tensor} in. */
  public DType storedType(Gpt2Tensor tensor) {
    return info(tensor).dtype();
  }

  private TensorInfo info(Gpt2Tensor tensor) {
    TensorInfo info = byName.get(tensor.name());
    if (info == null) {
      throw new IllegalArgumentException(tensor + " is not a tensor of this checkpoint");
    }
    return info;
  }

  @Override
  public void read(Gpt2Tensor tensor, long offset, ByteBuffer dst) throws IOException {
    TensorInfo info = info(tensor);
    int n = dst.remaining();
    if ((offset & 1) != 0 || (n & 1) != 0) {
      throw new IllegalArgumentException("fp16 reads are of whole halves: " + n + " bytes at " + offset);
    }
    if (info.dtype() == DType.F16) {
      file.read(info, offset, dst);
      return;
    }
    // F32 or BF16: read the source elements in bounded chunks and round each to fp16.
    int width = info.dtype().bytes();
    ByteBuffer out = dst.slice().order(ByteOrder.LITTLE_ENDIAN);
    ByteBuffer src = ByteBuffer.allocateDirect(Math.min(n / 2, CONVERT_CHUNK) * width)
        .order(ByteOrder.LITTLE_ENDIAN);
    long element = offset / 2;
    int done = 0;
    while (done < n / 2) {
      int count = Math.min(n / 2 - done, CONVERT_CHUNK);
      src.clear().limit(count * width);
      file.read(info, (element + done) * width, src);
      for (int i = 0; i < count; i++) {
        float f = width == 4 ? src.getFloat(4 * i) : Float.intBitsToFloat((src.getShort(2 * i) & 0xFFFF) << 16);
        out.putShort(2 * (done + i), Fp16.fromFloat(f));
      }
      done += count;
    }
    dst.position(dst.position() + n);
  }

  /**
   * Writes {@code weights} as a Hugging Face directory: {@code config.json} and an F16 {@code model.safetensors}
   * with {@code GPT2LMHeadModel}'s names (prefixed, tied {@code lm_head} left out, as {@code save_pretrained}
   * does). Streams one tensor at a time.
   */
  public static void save(Gpt2Weights weights, Path dir) throws IOException {
    Files.createDirectories(dir);
    new ObjectMapper().writerWithDefaultPrettyPrinter()
        .writeValue(dir.resolve(CONFIG_FILE).toFile(), weights.config().toHuggingFace());
    SafetensorsWriter writer = new SafetensorsWriter().metadata("format", "pt");
    for (Gpt2Tensor t : Gpt2Tensor.all(weights.config())) {
      writer.add(Gpt2Tensor.PREFIX + t.name(), DType.F16, t.shape(),
          SafetensorsWriter.streamed(t.halfBytes(), (at, buf) -> weights.read(t, at, buf)));
    }
    writer.write(dir.resolve(WEIGHTS_FILE));
  }

  @Override
  public void close() throws IOException {
    file.close();
  }
}
