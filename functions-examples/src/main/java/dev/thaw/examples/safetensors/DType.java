package dev.thaw.examples.safetensors;

import java.util.Optional;

/** The element types safetensors names, with their width in bytes. */
public enum DType {
  BOOL(1), U8(1), I8(1), F8_E4M3(1), F8_E5M2(1),
  I16(2), U16(2), F16(2), BF16(2),
  I32(4), U32(4), F32(4),
  I64(8), U64(8), F64(8);

  private final int bytes;

  DType(int bytes) {
    this.bytes = bytes;
  }

  /** Bytes per element. */
  public int bytes() {
    return bytes;
  }

  /** The dtype a header spells {@code name}, if it is one (the spelling is exact, as in the format). */
  public static Optional<DType> parse(String name) {
    for (DType d : values()) {
      if (d.name().equals(name)) {
        return Optional.of(d);
      }
    }
    return Optional.empty();
  }
}
