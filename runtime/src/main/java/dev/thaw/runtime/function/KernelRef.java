package dev.thaw.runtime.function;

import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonValue;

/**
 * A reference to a kernel of a module loaded through a {@link FunctionSession}: {@code module/entry}.
 * Serializes as that string; resolve it with {@link FunctionSession#kernel(KernelRef)}.
 */
public record KernelRef(String module, String entry) {

  public KernelRef {
    FunctionSession.checkName(module, "module");
    if (entry == null || entry.isEmpty() || entry.contains("/")) {
      throw new IllegalArgumentException("a kernel entry name must be non-empty and have no '/': " + entry);
    }
  }

  @JsonCreator
  public static KernelRef parse(String ref) {
    int slash = ref == null ? -1 : ref.indexOf('/');
    if (slash < 0) {
      throw new IllegalArgumentException("a kernel reference is module/entry: " + ref);
    }
    return new KernelRef(ref.substring(0, slash), ref.substring(slash + 1));
  }

  @JsonValue
  @Override
  public String toString() {
    return module + "/" + entry;
  }
}
