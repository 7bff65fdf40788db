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
 *
 * <p><b>Runs.</b> Copies are cheap when long (PCIe: 35 GB/s at 256 KiB a copy, 53 GB/s from 4 MiB), and the
 * first-access order interleaves allocations that lie apart on the device (a layer's KV cache between two of its
 * weights). So a restore copies runs: the first unit not queued yet, in plan order, and the units that continue it on
 * the device ({@link #nextOnDevice}), up to a size, as one copy. A host cache laid out in
 * {@link #runOrder()} holds a packed image as a few long runs, and the restore finds them.
 */
public final class RestorePlan {

  private final ImageManifest manifest;
  private final List<ImageManifest.Allocation> units;
  private final Map<String, Integer> unitOf;
  private final Map<String, AccessProfile.Verdict> verdicts;
  private final long[] bytesBefore;
  /** Per unit, the unit that starts where it ends on the device, or -1. */
  private final int[] nextOnDevice;
  private final List<ImageManifest.Allocation> runOrder;

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
    this.nextOnDevice = nextOnDevice(units);
    this.runOrder = runOrder(units, nextOnDevice);
  }

  private static int[] nextOnDevice(List<ImageManifest.Allocation> units) {
    int[] next = new int[units.size()];
    java.util.Arrays.fill(next, -1);
    Integer[] byAddress = new Integer[units.size()];
    for (int i = 0; i < byAddress.length; i++) {
      byAddress[i] = i;
    }
    java.util.Arrays.sort(byAddress, java.util.Comparator.comparingLong(i -> units.get(i).address()));
    for (int k = 0; k + 1 < byAddress.length; k++) {
      ImageManifest.Allocation a = units.get(byAddress[k]);
      ImageManifest.Allocation b = units.get(byAddress[k + 1]);
      if (a.size() > 0 && b.size() > 0 && a.address() + a.size() == b.address()) {
        next[byAddress[k]] = byAddress[k + 1];
      }
    }
    return next;
  }

  private static List<ImageManifest.Allocation> runOrder(List<ImageManifest.Allocation> units, int[] next) {
    boolean[] placed = new boolean[units.size()];
    List<ImageManifest.Allocation> order = new ArrayList<>(units.size());
    for (int u = 0; u < units.size(); u++) {
      for (int v = u; v >= 0 && !placed[v]; v = next[v]) {
        placed[v] = true;
        order.add(units.get(v));
      }
    }
    return List.copyOf(order);
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

  /**
   * The unit that starts on the device where unit {@code i} ends (a packed image's next buffer), or -1: a copy of
   * {@code i} can run on into it.
   */
  public int nextOnDevice(int i) {
    return nextOnDevice[i];
  }

  /**
   * The units in the order a host cache should lay them out: each unit in plan order not placed yet, then the units
   * that continue it on the device ({@link #nextOnDevice}) while they are not placed yet. A restore's runs (a unit and
   * what continues it on the device, up to a size) are then contiguous in host memory too.
   */
  public List<ImageManifest.Allocation> runOrder() {
    return runOrder;
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
