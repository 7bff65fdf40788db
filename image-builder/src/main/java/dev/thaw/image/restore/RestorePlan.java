package dev.thaw.image.restore;

import dev.thaw.image.ImageManifest;
import dev.thaw.runtime.speculation.AccessProfile;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The order an image's allocations are restored in and what its launches may be gated on: made once per parsed
 * {@link ImageManifest} and shared by every restore of it (immutable).
 *
 * <p>Units are the image's allocations in its profile's first-access order, then those no profiled launch touched,
 * in allocation order. A kernel can be gated on the allocations its arguments name only when profiling found it
 * {@code exact}; an {@code unsafe} kernel, or one no profiling invocation launched, waits for full residency.
 */
public final class RestorePlan {

  private final ImageManifest manifest;
  private final List<ImageManifest.Allocation> units;
  private final Map<String, Integer> unitOf;
  private final Map<String, AccessProfile.Verdict> verdicts;
  private final long[] bytesBefore;

  private RestorePlan(ImageManifest manifest) {
    this.manifest = manifest;
    Map<String, ImageManifest.Allocation> byName = new HashMap<>();
    manifest.allocations().forEach(a -> byName.put(a.name(), a));
    Set<String> order = new LinkedHashSet<>();
    for (String name : manifest.profile().firstAccessOrder()) {
      if (byName.containsKey(name)) {
        order.add(name);
      }
    }
    manifest.allocations().forEach(a -> order.add(a.name()));
    List<ImageManifest.Allocation> u = new ArrayList<>(order.size());
    Map<String, Integer> index = new HashMap<>();
    for (String name : order) {
      index.put(name, u.size());
      u.add(byName.get(name));
    }
    this.units = List.copyOf(u);
    this.unitOf = Map.copyOf(index);
    Map<String, AccessProfile.Verdict> v = new HashMap<>();
    manifest.profile().kernels().forEach((kernel, p) -> v.put(kernel, p.verdict()));
    this.verdicts = Map.copyOf(v);
    this.bytesBefore = new long[units.size() + 1];
    for (int i = 0; i < units.size(); i++) {
      bytesBefore[i + 1] = bytesBefore[i] + units.get(i).size();
    }
  }

  public static RestorePlan of(ImageManifest manifest) {
    return new RestorePlan(manifest);
  }

  public ImageManifest manifest() {
    return manifest;
  }

  public int unitCount() {
    return units.size();
  }

  /** The {@code i}-th allocation to restore. */
  public ImageManifest.Allocation unit(int i) {
    return units.get(i);
  }

  /** The restore position of the allocation named {@code allocation}; -1 if the image has none by that name. */
  public int unitOf(String allocation) {
    Integer i = unitOf.get(allocation);
    return i == null ? -1 : i;
  }

  /** Device bytes of the units before unit {@code i}. */
  public long bytesBefore(int i) {
    return bytesBefore[i];
  }

  public long totalBytes() {
    return bytesBefore[units.size()];
  }

  /**
   * True when launches of {@code kernel} ({@code module/entry}) may wait for the allocations their arguments name
   * alone: profiling found the kernel {@code exact}. False for {@code unsafe} and for kernels never profiled.
   */
  public boolean gatesOnArguments(String kernel) {
    return verdicts.get(kernel) == AccessProfile.Verdict.EXACT;
  }

  /** The verdict profiling gave {@code kernel}; null when it was never profiled. */
  public AccessProfile.Verdict verdict(String kernel) {
    return verdicts.get(kernel);
  }

  /** {@code recorded}, {@code speculated} or {@code none}: where the order comes from. */
  public String orderSource() {
    return manifest.profile().orderSource();
  }
}
