package dev.thaw.image.store;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.HashSet;
import java.util.Random;
import java.util.Set;

/**
 * The other process of {@link StoreProcessTest} (and of the CLI's tests of a store held by a writer):
 * {@code StoreChild <mode> <store> <progress-file>}. It writes
 * its progress to the file (one line per step, replaced atomically) and then waits to be killed.
 */
public final class StoreChild {

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    Path store = Path.of(args[1]);
    Path progress = Path.of(args[2]);
    RocksChunkStore s = RocksChunkStore.open(store);
    Random r = new Random(99);
    switch (mode) {
      case "put-then-wait" -> {
        for (int i = 0; i < 20; i++) {
          byte[] b = new byte[50_000];
          r.nextBytes(b);
          s.putChunk(Digest.of(b), ByteBuffer.wrap(b));
        }
        s.sync();
        report(progress, "put=20");
      }
      case "put-no-sync" -> {
        for (int i = 0; i < 20; i++) {
          byte[] b = new byte[50_000];
          r.nextBytes(b);
          s.putChunk(Digest.of(b), ByteBuffer.wrap(b));
        }
        report(progress, "put=20");
      }
      case "commit-forever" -> {
        for (int i = 0; ; i++) {
          Set<Digest> chunks = new HashSet<>();
          for (int j = 0; j < 4; j++) {
            byte[] b = new byte[20_000 + r.nextInt(20_000)];
            r.nextBytes(b);
            Digest d = Digest.of(b);
            s.putChunk(d, ByteBuffer.wrap(b));
            chunks.add(d);
          }
          s.commit("t-" + i, ("manifest " + i).getBytes(), chunks);
          report(progress, "committed=" + i);
        }
      }
      case "hold" -> {
        byte[] b = "held chunk".getBytes();
        Digest d = Digest.of(b);
        s.putChunk(d, ByteBuffer.wrap(b));
        s.commit("held", "held manifest".getBytes(), Set.of(d));
        report(progress, "holding");
      }
      case "open" -> report(progress, "open");
      default -> throw new IllegalArgumentException(mode);
    }
    Thread.sleep(Long.MAX_VALUE);
  }

  private static void report(Path progress, String line) throws Exception {
    Path tmp = progress.resolveSibling(progress.getFileName() + ".tmp");
    Files.writeString(tmp, line);
    Files.move(tmp, progress, StandardCopyOption.ATOMIC_MOVE,
        StandardCopyOption.REPLACE_EXISTING);
  }
}
