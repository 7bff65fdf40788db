package dev.thaw.pool.hbm;

import java.util.ArrayList;
import java.util.List;

/**
 * A read-only slab left on the device: where it is mapped in the image's address space, how big it is, which
 * buffers it holds, and a POSIX descriptor for its physical memory, valid in the process that holds this record
 * (the exporting worker, then the server, then the importing worker, each after {@code pidfd_getfd}).
 *
 * <p>{@link #encode} / {@link #decode} are a one-line text form for the pool's protocol:
 * {@code address:size:fd:buffer,buffer,...} with the address in hex.
 */
public record ExportedSlab(long address, long size, List<String> buffers, int fd) {

  public ExportedSlab {
    buffers = List.copyOf(buffers);
  }

  /** The same slab with a descriptor of another process. */
  public ExportedSlab withFd(int otherFd) {
    return new ExportedSlab(address, size, buffers, otherFd);
  }

  public String encode() {
    return Long.toHexString(address) + ":" + size + ":" + fd + ":" + String.join(",", buffers);
  }

  /** @throws IllegalArgumentException if the line is not {@link #encode()}'s form */
  public static ExportedSlab decode(String line) {
    String[] f = line.strip().split(":", 4);
    if (f.length != 4) {
      throw new IllegalArgumentException("not an exported slab: " + line);
    }
    try {
      return new ExportedSlab(Long.parseUnsignedLong(f[0], 16), Long.parseLong(f[1]), List.of(f[3].split(",")),
          Integer.parseInt(f[2]));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("not an exported slab: " + line, e);
    }
  }

  /** Bytes of device memory the slabs hold. */
  public static long bytes(List<ExportedSlab> slabs) {
    return slabs.stream().mapToLong(ExportedSlab::size).sum();
  }

  /** The encoded slabs, one per line. */
  public static String encodeAll(List<ExportedSlab> slabs) {
    StringBuilder b = new StringBuilder();
    slabs.forEach(s -> b.append(s.encode()).append('\n'));
    return b.toString();
  }

  public static List<ExportedSlab> decodeAll(String text) {
    List<ExportedSlab> out = new ArrayList<>();
    text.lines().filter(l -> !l.isBlank()).forEach(l -> out.add(decode(l)));
    return out;
  }
}
