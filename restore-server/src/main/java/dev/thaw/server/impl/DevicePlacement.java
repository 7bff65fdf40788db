package dev.thaw.server.impl;

import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.runtime.gpu.DeviceInfo;
import dev.thaw.server.ServeException;
import dev.thaw.server.spi.InstanceFactory;
import io.micrometer.core.instrument.Counter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.function.IntPredicate;

/**
 * Where instances go: each device's budget for instances, the bytes and instances placed on it, the device a start goes
 * to (the factory prices it: {@link InstanceFactory#place}) and the idle instances of other functions evicted when a
 * start fits nowhere, least recently used first. In one address space, an image whose recorded addresses overlap a
 * resident one's fits nowhere until that one is evicted.
 *
 * <p>Invariants: a device's reserved bytes are the sum of the footprints of the instances placed on it, starting ones
 * included (a slot enters through {@link #reserve} and leaves once, through {@link #release}); used only under the
 * {@link Scheduler}'s monitor, which guards it and the deployments it reads.
 */
final class DevicePlacement {

  /**
   * A device whose instance served a request this recently lends its link to no start (it counts as busy): a function
   * that just answered is likely to be asked again within the tens of milliseconds a restore takes.
   */
  static final long RECENTLY_BUSY_NANOS = 100_000_000;

  private final InstanceFactory factory;
  private final Deployments deployments;
  private final Counter closeFailures;
  private final long[] budget;
  private final long[] reserved;
  /** Instances placed on each device, starting ones included. */
  private final int[] placed;

  /**
   * @param gpuMemoryBytes each device's budget for instances; 0 for its whole memory
   * @param closeFailures counts the closes of evicted instances that failed
   */
  DevicePlacement(InstanceFactory factory, Deployments deployments, long gpuMemoryBytes, Counter closeFailures) {
    this.factory = factory;
    this.deployments = deployments;
    this.closeFailures = closeFailures;
    List<DeviceInfo> devices = List.copyOf(factory.devices());
    this.budget = new long[devices.size()];
    this.reserved = new long[devices.size()];
    this.placed = new int[devices.size()];
    for (int i = 0; i < budget.length; i++) {
      long total = devices.get(i).totalMemoryBytes();
      budget[i] = gpuMemoryBytes > 0 ? Math.min(gpuMemoryBytes, total) : total;
    }
  }

  int devices() {
    return budget.length;
  }

  /** Device {@code device}'s budget for instances; fixed, so it may be read without the scheduler's monitor. */
  long budget(int device) {
    return budget[device];
  }

  long reserved(int device) {
    return reserved[device];
  }

  /**
   * Where a start of {@code d} goes ({@link #choose}), evicting idle instances of other functions, least recently used
   * first, until it fits; empty when it fits nowhere even then.
   */
  Optional<ColdStartPlacement.Choice> chooseMakingRoom(Deployment d) {
    Optional<ColdStartPlacement.Choice> choice = choose(d.image);
    if (choice.isEmpty()) {
      for (InstanceSlot victim : evictionCandidates(d)) {
        evict(victim);
        victim.deployment.meters.evicted("memory");
        choice = choose(d.image);
        if (choice.isPresent()) {
          break;
        }
      }
    }
    return choice;
  }

  /**
   * The devices a start of group {@code d} goes to, rank r's at r ({@link #chooseGroup}), evicting idle instances of
   * other functions, least recently used first, until it fits; empty when it fits nowhere even then.
   */
  Optional<List<Integer>> chooseGroupMakingRoom(Deployment d) {
    Optional<List<Integer>> devices = chooseGroup(d.image);
    if (devices.isEmpty()) {
      for (InstanceSlot victim : evictionCandidates(d)) {
        evict(victim);
        victim.deployment.meters.evicted("memory");
        devices = chooseGroup(d.image);
        if (devices.isPresent()) {
          break;
        }
      }
    }
    return devices;
  }

  /**
   * Places {@code slot}, made for a choice of {@link #chooseMakingRoom} or {@link #chooseGroupMakingRoom}: its
   * footprint is reserved on each of its devices.
   */
  void reserve(InstanceSlot slot) {
    slot.deployment.slots.add(slot);
    for (int device : slot.devices) {
      reserved[device] += slot.deployment.image.deviceBytes();
      placed[device]++;
    }
  }

  /** Takes {@code slot} off its device and closes its instance, if it has started, on the slot's thread. */
  void evict(InstanceSlot slot) {
    release(slot);
    if (slot.instance != null) {
      slot.closeOnThread(slot.instance, closeFailures);
    }
  }

  /** Takes {@code slot} off its device and its deployment (once: later calls do nothing); closes nothing. */
  void release(InstanceSlot slot) {
    if (!slot.evicted) {
      slot.evicted = true;
      slot.deployment.slots.remove(slot);
      for (int device : slot.devices) {
        reserved[device] -= slot.deployment.image.deviceBytes();
        placed[device]--;
      }
    }
  }

  /** True if {@code image} fits a device now, or would once that device's instances left. */
  boolean fits(ImageInfo image) {
    if (image.ranks() > 1) {
      return chooseGroup(image).isPresent() || devicesWhere(i -> image.deviceBytes() <= budget[i]) >= image.ranks();
    }
    if (fittingDevice(image) >= 0) {
      return true;
    }
    for (int i = 0; i < budget.length; i++) {
      if (image.deviceBytes() <= budget[i]) {
        return true;
      }
    }
    return false;
  }

  /** How many devices {@code test} holds for. */
  private int devicesWhere(IntPredicate test) {
    int n = 0;
    for (int i = 0; i < budget.length; i++) {
      n += test.test(i) ? 1 : 0;
    }
    return n;
  }

  /**
   * The devices a group's ranks go to, rank r's at r, in ordinal order: among the devices its footprint and an
   * instance slot fit now, those that hold no instance first (a rank then shares neither its device nor its link),
   * then those not busy, then the most free budget. Empty when fewer than its ranks fit.
   */
  private Optional<List<Integer>> chooseGroup(ImageInfo image) {
    if (overlapsResident(image)) {
      return Optional.empty();
    }
    List<Integer> fit = new ArrayList<>();
    for (int i = 0; i < budget.length; i++) {
      if (budget[i] - reserved[i] >= image.deviceBytes() && placed[i] < factory.maxInstances(i)) {
        fit.add(i);
      }
    }
    if (fit.size() < image.ranks()) {
      return Optional.empty();
    }
    fit.sort(Comparator.<Integer>comparingInt(i -> placed[i] == 0 ? 0 : 1).thenComparingInt(i -> busy(i) ? 1 : 0)
        .thenComparingLong(i -> reserved[i] - budget[i]));
    List<Integer> chosen = new ArrayList<>(fit.subList(0, image.ranks()));
    chosen.sort(Comparator.naturalOrder());
    return Optional.of(List.copyOf(chosen));
  }

  /** The refusal of {@code d}'s requests when no device has room for it: what it needs, and what holds it. */
  ServeException noRoom(Deployment d, long retryAfterSeconds) {
    return new ServeException(503, "no_capacity", "function '" + d.name + "' needs " + mib(d.image.deviceBytes())
        + " of device memory" + (d.image.ranks() > 1 ? " on each of " + d.image.ranks() + " devices at once" : "") + (factory.sharedAddressSpace() ? " at its recorded addresses" : "")
        + " and an instance slot; busy instances hold " + (memoryFree(d.image) ? "every slot" : "the memory")
        + " now", retryAfterSeconds);
  }

  /**
   * Where a start of {@code image} goes and by which way in ({@link InstanceFactory#place}), over every device as the
   * scheduler sees it: whether the image fits its budget and instance slots, its free budget, whether it is busy
   * ({@link #busy}), what the factory keeps of the image there, and whether it holds no instance at all (its link is
   * then lent whole). Empty when it fits nowhere now.
   */
  private Optional<ColdStartPlacement.Choice> choose(ImageInfo image) {
    if (overlapsResident(image)) {
      return Optional.empty();
    }
    List<ColdStartPlacement.DeviceView> views = new ArrayList<>(budget.length);
    for (int i = 0; i < budget.length; i++) {
      long free = budget[i] - reserved[i];
      boolean fits = free >= image.deviceBytes() && placed[i] < factory.maxInstances(i);
      views.add(new ColdStartPlacement.DeviceView(i, fits, free, busy(i), factory.residentBytes(image.tag(), i),
          placed[i] == 0));
    }
    return factory.place(image.tag(), image.deviceBytes(), views).filter(c -> views.get(c.device()).fits());
  }

  /**
   * True when device {@code device} is doing something a start elsewhere must not slow down by borrowing its link: an
   * instance there is starting or serving a request, has served one within {@link #RECENTLY_BUSY_NANOS} (more are
   * likely on their way), or a start in progress borrows its link already.
   */
  private boolean busy(int device) {
    long now = System.nanoTime();
    for (Deployment d : deployments.all()) {
      for (InstanceSlot s : d.slots) {
        boolean starting = s.instance == null;
        if (s.devices.contains(device) && (starting || s.busy() || s.served > 0 && now - s.idleSince < RECENTLY_BUSY_NANOS)
            || starting && s.choice.helpers().contains(device)) {
          return true;
        }
      }
    }
    return false;
  }

  /** True if some device has the memory for {@code image} now, slots aside. */
  private boolean memoryFree(ImageInfo image) {
    if (image.ranks() > 1) {
      return devicesWhere(i -> budget[i] - reserved[i] >= image.deviceBytes()) >= image.ranks();
    }
    for (int i = 0; i < budget.length; i++) {
      if (budget[i] - reserved[i] >= image.deviceBytes()) {
        return true;
      }
    }
    return false;
  }

  /** A device {@code image} fits now (budget and instance slots), or -1. */
  private int fittingDevice(ImageInfo image) {
    if (overlapsResident(image)) {
      return -1;
    }
    for (int i = 0; i < budget.length; i++) {
      if (budget[i] - reserved[i] >= image.deviceBytes() && placed[i] < factory.maxInstances(i)) {
        return i;
      }
    }
    return -1;
  }

  /** In one address space, an instance of another image whose recorded addresses overlap {@code image}'s. */
  private boolean overlapsResident(ImageInfo image) {
    if (factory.sharedAddressSpace()) {
      for (Deployment other : deployments.all()) {
        if (!other.slots.isEmpty() && image.overlaps(other.image)) {
          return true;
        }
      }
    }
    return false;
  }

  /** Idle instances of other functions, least recently used first. */
  private List<InstanceSlot> evictionCandidates(Deployment d) {
    List<InstanceSlot> idle = new ArrayList<>();
    for (Deployment other : deployments.all()) {
      if (other != d) {
        other.slots.stream().filter(s -> s.instance != null && !s.busy()).forEach(idle::add);
      }
    }
    idle.sort(Comparator.comparingLong(s -> s.idleSince));
    return idle;
  }

  private static String mib(long bytes) {
    return String.format(Locale.ROOT, "%.1f MiB", bytes / (double) (1 << 20));
  }
}
