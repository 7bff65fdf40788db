package dev.thaw.pool;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.thaw.image.ProgressListener;
import dev.thaw.image.build.BuildOptions;
import dev.thaw.image.build.BuildResult;
import dev.thaw.image.build.FastCdcChunker;
import dev.thaw.image.build.ImageBuilder;
import dev.thaw.image.store.Digest;
import dev.thaw.image.store.RocksChunkStore;
import dev.thaw.image.store.StoreOptions;
import dev.thaw.runtime.gpu.GpuContext;
import dev.thaw.runtime.gpu.GpuDriver;
import dev.thaw.runtime.gpu.GpuDrivers;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.List;

/** Builds images into a real store for the pool's tests, on the device {@code THAW_DEVICE} picks. */
public final class PoolTestImages {

  private static final ObjectMapper JSON = new ObjectMapper();

  private PoolTestImages() {}

  /** An image built and committed; the store is closed again, so workers open it as its only readers. */
  public record Built(String tag, byte[] manifest, BuildResult result) {}

  public static Built build(Path store, String tag, String functionClass, String config, String sampleRequest)
      throws Exception {
    BuildOptions o = new BuildOptions().setFunctionClass(functionClass).setConfig(config).setTag(tag);
    if (sampleRequest != null) {
      o.addSampleRequest(JSON.readTree(sampleRequest));
    }
    try (RocksChunkStore s = RocksChunkStore.open(store); GpuDriver driver = GpuDrivers.open();
        GpuContext ctx = driver.createContext(0)) {
      BuildResult r = new ImageBuilder(s, new FastCdcChunker()).build(o, ctx, ProgressListener.NONE);
      return new Built(tag, s.manifest(tag).orElseThrow(), r);
    }
  }

  /** The probe function's image: one buffer {@code secret}. */
  public static Built probe(Path store, String tag) throws Exception {
    return build(store, tag, PoolProbeFunction.class.getName(), "{}", "{\"op\": \"echo\", \"value\": 1}");
  }

  public static byte[] json(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** Flips one byte in the middle of {@code chunk}'s bytes where the store keeps them: its digest no longer matches. */
  public static void corrupt(Path store, Digest chunk) throws Exception {
    byte[] bytes;
    try (RocksChunkStore s = RocksChunkStore.open(new StoreOptions().setPath(store).setReadOnly(true))) {
      ByteBuffer b = ByteBuffer.allocate(s.chunkSize(chunk).orElseThrow());
      s.readChunk(chunk, b);
      bytes = b.array();
    }
    List<Path> files;
    try (var walk = Files.walk(store)) {
      files = walk.filter(Files::isRegularFile).toList();
    }
    for (Path f : files) {
      byte[] all = Files.readAllBytes(f);
      for (int i = 0; i + bytes.length <= all.length; i++) {
        if (all[i] == bytes[0] && Arrays.equals(all, i, i + bytes.length, bytes, 0, bytes.length)) {
          try (FileChannel ch = FileChannel.open(f, StandardOpenOption.WRITE)) {
            ch.write(ByteBuffer.wrap(new byte[] {(byte) (all[i + bytes.length / 2] ^ 0x40)}), i + bytes.length / 2);
          }
          return;
        }
      }
    }
    throw new AssertionError("chunk " + chunk + " is in no file of " + store);
  }}
