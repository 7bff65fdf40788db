package dev.thaw.image.archive;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The few pieces of POSIX ustar the image archive needs: regular files with names under 100 bytes, written
 * with a fixed mode and mtime 0 so that one image always exports to the same bytes. Reading checks every
 * header's checksum and that every entry and the end-of-archive marker are complete.
 */
final class Tar {

  static final int BLOCK = 512;
  private static final long MAX_ENTRY = 077777777777L; // 11 octal digits

  record Entry(String name, long size, long dataOffset) {}

  private Tar() {}

  static ByteBuffer header(String name, long size) {
    byte[] n = name.getBytes(StandardCharsets.US_ASCII);
    if (n.length >= 100) {
      throw new IllegalArgumentException("tar entry name too long: " + name);
    }
    if (size < 0 || size > MAX_ENTRY) {
      throw new IllegalArgumentException("tar entry too large: " + size);
    }
    byte[] h = new byte[BLOCK];
    System.arraycopy(n, 0, h, 0, n.length);
    octal(h, 100, 8, 0644);
    octal(h, 108, 8, 0);
    octal(h, 116, 8, 0);
    octal(h, 124, 12, size);
    octal(h, 136, 12, 0);
    h[156] = '0';
    System.arraycopy("ustar\0".getBytes(StandardCharsets.US_ASCII), 0, h, 257, 6);
    h[263] = '0';
    h[264] = '0';
    for (int i = 148; i < 156; i++) {
      h[i] = ' ';
    }
    long sum = checksum(h);
    byte[] c = String.format("%06o", sum).getBytes(StandardCharsets.US_ASCII);
    System.arraycopy(c, 0, h, 148, 6);
    h[154] = 0;
    h[155] = ' ';
    return ByteBuffer.wrap(h);
  }

  static int padding(long size) {
    return (int) ((BLOCK - size % BLOCK) % BLOCK);
  }

  static ByteBuffer end() {
    return ByteBuffer.allocate(2 * BLOCK);
  }

  /** Every entry's header, checked; fails on a bad header or a file that ends early. */
  static List<Entry> list(FileChannel ch) throws IOException {
    List<Entry> out = new ArrayList<>();
    long fileSize = ch.size();
    long pos = 0;
    ByteBuffer block = ByteBuffer.allocate(BLOCK);
    while (true) {
      if (pos + BLOCK > fileSize) {
        throw new ArchiveException("the archive is truncated: it ends at byte " + fileSize
            + " without an end-of-archive marker");
      }
      block.clear();
      readFully(ch, block, pos);
      byte[] h = block.array();
      if (allZero(h)) {
        // The end is two zero blocks; one alone means the file was cut inside the marker.
        block.clear();
        if (pos + 2 * BLOCK > fileSize) {
          throw new ArchiveException("the archive is truncated inside its end-of-archive marker");
        }
        readFully(ch, block, pos + BLOCK);
        if (!allZero(block.array())) {
          throw new ArchiveException("the archive is damaged: a lone zero block at byte " + pos);
        }
        return out;
      }
      if (!new String(h, 257, 5, StandardCharsets.US_ASCII).equals("ustar")) {
        throw new ArchiveException("not a ustar archive (no magic in the header at byte " + pos + ")");
      }
      long expected = parseOctal(h, 148, 8, pos);
      for (int i = 148; i < 156; i++) {
        h[i] = ' ';
      }
      if (checksum(h) != expected) {
        throw new ArchiveException("the tar header at byte " + pos + " is damaged (checksum mismatch)");
      }
      String name = cString(h, 0, 100);
      String prefix = cString(h, 345, 155);
      if (!prefix.isEmpty()) {
        name = prefix + "/" + name;
      }
      long size = parseOctal(h, 124, 12, pos);
      byte type = h[156];
      long data = pos + BLOCK;
      if (data + size + padding(size) > fileSize) {
        throw new ArchiveException("the archive is truncated inside " + name);
      }
      if (type == '0' || type == 0) {
        out.add(new Entry(name, size, data));
      } else if (type != '5') {
        throw new ArchiveException("unsupported tar entry type '" + (char) type + "' for " + name);
      }
      pos = data + size + padding(size);
    }
  }

  static void readFully(FileChannel ch, ByteBuffer dst, long pos) throws IOException {
    while (dst.hasRemaining()) {
      int n = ch.read(dst, pos);
      if (n < 0) {
        throw new ArchiveException("the archive is truncated at byte " + pos);
      }
      pos += n;
    }
  }

  private static boolean allZero(byte[] b) {
    for (byte x : b) {
      if (x != 0) {
        return false;
      }
    }
    return true;
  }

  private static long checksum(byte[] h) {
    long s = 0;
    for (byte b : h) {
      s += b & 0xff;
    }
    return s;
  }

  private static void octal(byte[] h, int off, int len, long v) {
    String s = Long.toOctalString(v);
    String padded = "0".repeat(len - 1 - s.length()) + s;
    System.arraycopy(padded.getBytes(StandardCharsets.US_ASCII), 0, h, off, len - 1);
    h[off + len - 1] = 0;
  }

  private static long parseOctal(byte[] h, int off, int len, long at) {
    long v = 0;
    boolean any = false;
    for (int i = off; i < off + len; i++) {
      byte b = h[i];
      if (b == 0 || b == ' ') {
        if (any) {
          break;
        }
        continue;
      }
      if (b < '0' || b > '7') {
        throw new ArchiveException("the tar header at byte " + at + " is damaged (bad number)");
      }
      v = v * 8 + (b - '0');
      any = true;
    }
    return v;
  }

  private static String cString(byte[] h, int off, int len) {
    int end = off;
    while (end < off + len && h[end] != 0) {
      end++;
    }
    return new String(h, off, end - off, StandardCharsets.US_ASCII);
  }
}
