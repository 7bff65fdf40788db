package dev.thaw.runtime.ptx;

import dev.thaw.runtime.gpu.ParamLayout;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The header and kernel signatures of a PTX module.
 *
 * @param version the {@code .version} directive, e.g. {@code 8.0}
 * @param target the {@code .target} directive, e.g. {@code sm_80}
 * @param addressSize the {@code .address_size}, 64 unless stated
 * @param entries each {@code .entry}'s parameter layout, in the order they appear
 */
public record PtxModuleInfo(String version, String target, int addressSize, Map<String, ParamLayout> entries) {

  public PtxModuleInfo {
    entries = Collections.unmodifiableMap(new LinkedHashMap<>(entries));
  }
}
