package dev.thaw.bench.chunk;

import dev.thaw.image.chunk.FastCdc;
import dev.thaw.image.chunk.FastCdcOptions;
import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.Blackhole;

/**
 * What the snapshot step pays per byte to name chunks: FastCDC over a direct buffer of random fp16-like
 * data ({@link #cut}), and FastCDC plus SHA-256 of every chunk ({@link #cutAndHash}), the builder's work
 * between the staging buffer and the store. {@link #hashOnly} is SHA-256 alone, the floor. One operation is
 * one {@value #SIZE_MIB} MiB buffer: MB/s = {@value #SIZE_MIB} × 1.048576 / (s/op). Results:
 * {@code docs/benchmarks/chunking.md}.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Fork(value = 1, jvmArgs = {"-Xms1g", "-Xmx1g"})
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 2)
public class ChunkingBenchmark {

  static final int SIZE_MIB = 64;

  @Param({"65536", "131072", "262144", "524288", "1048576", "2097152", "4194304"})
  public int avgSize;

  private ByteBuffer data;
  private FastCdc chunker;
  private MessageDigest sha;

  @Setup
  public void setup() throws Exception {
    data = ByteBuffer.allocateDirect(SIZE_MIB << 20);
    SplittableRandom r = new SplittableRandom(42);
    while (data.remaining() >= 8) {
      data.putLong(r.nextLong());
    }
    data.clear();
    chunker = new FastCdc(FastCdcOptions.ofAverage(avgSize));
    sha = MessageDigest.getInstance("SHA-256");
  }

  @Benchmark
  public long cut() {
    long[] count = new long[1];
    chunker.update(data, (o, l) -> count[0]++);
    chunker.finish((o, l) -> count[0]++);
    return count[0];
  }

  @Benchmark
  public void cutAndHash(Blackhole bh) {
    FastCdc.Sink sink = (o, l) -> {
      sha.update(data.duplicate().position((int) o).limit((int) o + l));
      bh.consume(sha.digest());
    };
    chunker.update(data, sink);
    chunker.finish(sink);
  }

  @Benchmark
  public byte[] hashOnly() {
    sha.update(data.duplicate());
    return sha.digest();
  }
}
