package dev.thaw.runtime.speculation;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonValue;
import dev.thaw.runtime.function.FunctionSession;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * What profiling invocations found out about an image's launches, for the manifest's {@code profile} section:
 * the order in which allocations were first touched (the background restore order) and, per kernel, whether
 * speculation held on every launch. Serializes with Jackson as it stands.
 *
 * @param formatVersion {@value #FORMAT_VERSION}
 * @param image the image it was made for
 * @param orderSource where {@code firstTouch} comes from
 * @param launches launches validated
 * @param firstTouch allocation names, in the order launches first touched them; within one launch, in parameter
 *     order, then by address. Allocations no launch touched are not listed.
 * @param kernels per kernel ({@code module/entry}), sorted by name
 * @param written allocations the invocations wrote, by kernel stores or host uploads ({@link
 *     FunctionSession#upload}), sorted; null when not every write could be seen (a
 *     kernel launched unvalidated on a GPU). The others are read-only: the HBM tier keeps them on the device.
 */
public record AccessProfile(int formatVersion, String image, OrderSource orderSource, long launches,
    List<String> firstTouch, Map<String, KernelProfile> kernels, List<String> written) {

  public static final int FORMAT_VERSION = 1;

  public AccessProfile {
    firstTouch = List.copyOf(firstTouch);
    kernels = Collections.unmodifiableMap(new TreeMap<>(kernels));
    written = written == null ? null : List.copyOf(new TreeSet<>(written));
  }

  /** A profile that does not say what was written. */
  public AccessProfile(int formatVersion, String image, OrderSource orderSource, long launches,
      List<String> firstTouch, Map<String, KernelProfile> kernels) {
    this(formatVersion, image, orderSource, launches, firstTouch, kernels, null);
  }

  /** Where a first-touch order comes from. */
  public enum OrderSource {
    /** The exact accesses recorded on the sim device: includes buffers speculation missed. */
    RECORDED,
    /**
     * The speculated sets, in launch order (where accesses cannot be recorded: on a GPU, validation sees only the
     * accesses speculation missed, so buffers only such accesses reach are not ordered).
     */
    SPECULATED;

    @JsonValue
    public String json() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** Whether a kernel's launches can be gated on their speculated buffers alone. */
  public enum Verdict {
    /** Every profiled launch stayed inside its speculated set. */
    @JsonProperty("exact") EXACT,
    /** Some launch did not: restore must make it wait for full residency. */
    @JsonProperty("unsafe") UNSAFE
  }

  /**
   * One kernel's verdict.
   *
   * @param verdict exact or unsafe
   * @param launches its launches validated
   * @param reasons why it is unsafe (the first few violations or faults, and how many there were); empty when exact
   * @param analysisNotes what the PTX analysis could not follow (its parameters were taken as read-write)
   */
  public record KernelProfile(Verdict verdict, long launches, List<String> reasons, List<String> analysisNotes) {

    public KernelProfile {
      reasons = List.copyOf(reasons);
      analysisNotes = List.copyOf(analysisNotes);
    }
  }

  /** The verdict of {@code kernel} ({@code module/entry}); null when it was never launched while profiling. */
  public Verdict verdict(String kernel) {
    KernelProfile k = kernels.get(kernel);
    return k == null ? null : k.verdict();
  }
}
