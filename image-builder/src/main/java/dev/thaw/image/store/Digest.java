package dev.thaw.image.store;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/**
 * A SHA-256 content digest, written as OCI writes blob digests ({@code sha256:<64 lowercase hex>}), so a
 * chunk's name is also a valid OCI blob digest.
 */
public record Digest(String hex) implements Comparable<Digest> {

  private static final String PREFIX = "sha256:";

  public Digest {
    if (!isHex64(hex)) {
      throw new IllegalArgumentException("not a SHA-256 digest: " + hex);
    }
  }

  /** What {@code [0-9a-f]{64}} matches, without a regex: a manifest constructs thousands of digests per read. */
  private static boolean isHex64(String s) {
    if (s == null || s.length() != 64) {
      return false;
    }
    for (int i = 0; i < 64; i++) {
      char c = s.charAt(i);
      if ((c < '0' || c > '9') && (c < 'a' || c > 'f')) {
        return false;
      }
    }
    return true;
  }

  /** Parses {@code sha256:<hex>}. */
  public static Digest parse(String s) {
    if (s == null || !s.startsWith(PREFIX)) {
      throw new IllegalArgumentException("a digest is sha256:<64 hex digits>, not " + s);
    }
    return new Digest(s.substring(PREFIX.length()));
  }

  /** The digest of {@code data}'s remaining bytes; its position is left unchanged. */
  public static Digest of(ByteBuffer data) {
    MessageDigest sha = sha256();
    sha.update(data.duplicate());
    return fromBytes(sha.digest());
  }

  public static Digest of(byte[] data) {
    return fromBytes(sha256().digest(data));
  }

  public static Digest fromBytes(byte[] raw) {
    if (raw.length != 32) {
      throw new IllegalArgumentException("a SHA-256 digest has 32 bytes, not " + raw.length);
    }
    return new Digest(HexFormat.of().formatHex(raw));
  }

  /** The 32 raw bytes: the store's key. */
  public byte[] toBytes() {
    return HexFormat.of().parseHex(hex);
  }

  public static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("the JDK has no SHA-256", e);
    }
  }

  /**
   * The hex's hash, written out rather than left to the record's bootstrapped method handle: a restore looks up
   * every chunk of an image by digest, and the generated one is slow until compiled (cold restores run it first).
   */
  @Override
  public int hashCode() {
    return hex.hashCode();
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Digest d && hex.equals(d.hex);
  }

  @Override
  public int compareTo(Digest o) {
    return hex.compareTo(o.hex);
  }

  @Override
  public String toString() {
    return PREFIX + hex;
  }
}
