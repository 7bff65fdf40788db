package dev.thaw.image;

import com.fasterxml.jackson.core.JsonToken;
import dev.thaw.image.store.ChunkStore;
import dev.thaw.runtime.function.HostStates;
import dev.thaw.runtime.function.ThawFunction;
import dev.thaw.runtime.speculation.AccessProfile;

import com.fasterxml.jackson.annotation.JacksonInject;
import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.OptBoolean;
import com.fasterxml.jackson.annotation.JsonPropertyOrder;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationContext;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.InjectableValues;
import com.fasterxml.jackson.databind.JsonDeserializer;
import com.fasterxml.jackson.databind.JsonMappingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.JsonSerializer;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.SerializerProvider;
import com.fasterxml.jackson.databind.annotation.JsonDeserialize;
import com.fasterxml.jackson.databind.annotation.JsonSerialize;
import com.fasterxml.jackson.databind.module.SimpleModule;
import dev.thaw.image.store.Digest;
import dev.thaw.runtime.function.AllocationRecord;
import dev.thaw.runtime.function.ModuleRecord;
import dev.thaw.runtime.function.SessionTable;
import java.io.IOException;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Pattern;

/**
 * What an image is, apart from its chunks: versioned JSON, documented field by field in
 * {@code docs/image-format.md}.
 *
 * <p>A manifest names every chunk it needs by digest ({@link #chunkDigests()}); the chunks themselves live in the
 * {@link ChunkStore}. {@link #read} checks the schema version first and then every field, so
 * a manifest that reads is one a restore can trust structurally (the chunks' contents are checked against their
 * digests when they are used).
 *
 * @param schemaVersion always {@link #SCHEMA_VERSION} when written by this Thaw
 * @param function the function class and the config its {@code init} ran with
 * @param device the device the image was built on
 * @param allocations every allocation of the function's session, in allocation order, with its chunks
 * @param modules every module, with its cubin for {@link Device#smArch()} and its PTX for other architectures
 * @param hostState the function's host state as JSON ({@link HostStates})
 * @param samples the sample requests the build ran and their responses, for checking a restore
 * @param build when, by which Thaw, how long, how many bytes
 * @param profile the access profile; present and empty until profiling fills it
 */
@JsonPropertyOrder({"schemaVersion", "function", "device", "allocations", "modules", "hostState", "samples", "build",
    "profile"})
public record ImageManifest(
    @JsonDeserialize(using = IntegerOnlyDeserializer.class) int schemaVersion,
    Function function,
    Device device,
    List<Allocation> allocations,
    List<Module> modules,
    JsonNode hostState,
    List<Sample> samples,
    Build build,
    Profile profile) {

  /** The schema this Thaw writes and the only one it reads. */
  public static final int SCHEMA_VERSION = 1;

  /** What a manifest without {@code profile.writtenAllocations} (built before it existed) reads as: unknown. */
  static final String ABSENT_WRITTEN = "thaw.manifest.absent-writtenAllocations";
  /** Injected for an absent {@code writtenAllocations}; recognised by identity and read as null. */
  private static final List<String> UNKNOWN_WRITES = Collections.unmodifiableList(new ArrayList<>());

  private static final Pattern ARCH = Pattern.compile("sm_[0-9]{2,3}[a-z]?");
  private static final ObjectMapper JSON = StrictJson.configure(new ObjectMapper())
      .registerModule(new SimpleModule("thaw-digest")
          .addSerializer(Digest.class, new DigestSerializer())
          .addDeserializer(Digest.class, new DigestDeserializer()))
      .enable(DeserializationFeature.FAIL_ON_MISSING_CREATOR_PROPERTIES)
      .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES)
      .enable(DeserializationFeature.FAIL_ON_NULL_CREATOR_PROPERTIES)
      .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
      .enable(SerializationFeature.INDENT_OUTPUT)
      .setInjectableValues(new InjectableValues.Std().addValue(ABSENT_WRITTEN, UNKNOWN_WRITES));

  public ImageManifest {
    allocations = List.copyOf(allocations);
    modules = List.copyOf(modules);
    samples = List.copyOf(samples);
  }

  /**
   * @param className the {@link ThawFunction} implementation
   * @param config the configuration its {@code init} was given ({@code {}} when none)
   */
  public record Function(String className, JsonNode config) {}

  /**
   * @param name the device's name, e.g. {@code NVIDIA H200}
   * @param computeCapability e.g. {@code 9.0}
   * @param smArch e.g. {@code sm_90}: the architecture of every module's cubin
   * @param driver {@code cuda} or {@code sim}
   */
  public record Device(String name, String computeCapability, String smArch, String driver) {}

  /**
   * @param name the name the function allocated it under
   * @param address its device address; a restore maps it there again
   * @param size bytes, as asked for
   * @param chunks its contents, in order: contiguous from offset 0 to {@code size}
   */
  @JsonPropertyOrder({"name", "address", "size", "chunks"})
  public record Allocation(String name,
      @JsonSerialize(using = HexAddressSerializer.class) @JsonDeserialize(using = HexAddressDeserializer.class)
      long address,
      long size, List<Chunk> chunks) {

    public Allocation {
      chunks = List.copyOf(chunks);
    }
  }

  /**
   * @param digest the chunk's SHA-256 in OCI form
   * @param offset where it starts in its allocation
   * @param length its size in bytes
   */
  @JsonPropertyOrder({"digest", "offset", "length"})
  public record Chunk(Digest digest, long offset, int length) {}

  /**
   * A blob stored as one chunk, e.g. a cubin.
   *
   * @param digest its SHA-256 in OCI form
   * @param length its size in bytes
   */
  public record Blob(Digest digest, int length) {}

  /**
   * @param name the name the function loaded it under
   * @param arch the architecture {@code cubin} is for (the build device's)
   * @param cubin the JIT's output for {@code arch}, stored as a chunk
   * @param ptx the PTX, for devices of another architecture
   * @param kernels each {@code .entry} with its parameter layout, from the PTX
   */
  @JsonPropertyOrder({"name", "arch", "cubin", "ptx", "kernels"})
  public record Module(String name, String arch, Blob cubin, String ptx, List<Kernel> kernels) {

    public Module {
      kernels = List.copyOf(kernels);
    }
  }

  /**
   * @param name the entry's name
   * @param paramBytes the size of its parameter buffer
   * @param params its parameters in order
   */
  public record Kernel(String name, int paramBytes, List<Param> params) {

    public Kernel {
      params = List.copyOf(params);
    }
  }

  /** One kernel parameter: its PTX name, byte offset and size in the parameter buffer, and type. */
  public record Param(String name, int offset, int size, String type) {}

  /**
   * @param request a sample request's JSON body
   * @param response the function's JSON response to it at build time
   */
  public record Sample(JsonNode request, JsonNode response) {}

  /**
   * @param created when the build finished (ISO-8601, UTC)
   * @param thawVersion the Thaw that built it
   * @param buildMillis wall time from loading the function to the commit
   * @param totalBytes device bytes the allocations hold
   * @param uniqueBytes bytes of the image's distinct chunks (allocation chunks and cubins)
   * @param chunkCount how many distinct chunks the image names
   */
  public record Build(String created, String thawVersion, double buildMillis, long totalBytes, long uniqueBytes,
      int chunkCount) {}

  /**
   * The access profile recorded by the build's profiling invocations (the sample requests, run with validation
   * on); empty when the build ran none.
   *
   * @param orderSource {@code recorded} (exact accesses, on the sim device), {@code speculated} (the
   *     speculated sets, on a GPU), or {@code none}
   * @param launches launches validated
   * @param firstAccessOrder allocation names in the order the invocations first touched them: the background
   *     order of on-demand restore
   * @param kernels per kernel ({@code module/entry}): {@code exact} or {@code unsafe}, with the reasons
   * @param writtenAllocations allocations the profiled invocations wrote (kernel stores and host uploads), or null
   *     (absent from the JSON) when unknown: images built before this field, or a profile that could not see every
   *     write. Every other allocation is read-only ({@link ImageManifest#readOnlyAllocations()}).
   */
  @JsonInclude(JsonInclude.Include.ALWAYS)
  public record Profile(String orderSource, long launches, List<String> firstAccessOrder,
      Map<String, AccessProfile.KernelProfile> kernels,
      @JsonInclude(JsonInclude.Include.NON_NULL)
      @JacksonInject(value = ABSENT_WRITTEN, useInput = OptBoolean.TRUE)
      List<String> writtenAllocations) {

    public Profile {
      firstAccessOrder = List.copyOf(firstAccessOrder);
      kernels = Collections.unmodifiableMap(new TreeMap<>(kernels));
      // The injected stand-in for an absent field (Jackson refuses a null creator property) means unknown.
      writtenAllocations = writtenAllocations == null || writtenAllocations == UNKNOWN_WRITES ? null
          : List.copyOf(writtenAllocations);
    }

    /** A profile that does not say what was written (as every image built before {@code writtenAllocations}). */
    public Profile(String orderSource, long launches, List<String> firstAccessOrder,
        Map<String, AccessProfile.KernelProfile> kernels) {
      this(orderSource, launches, firstAccessOrder, kernels, null);
    }

    public static Profile empty() {
      return new Profile("none", 0, List.of(), Map.of());
    }

    public static Profile of(AccessProfile p) {
      return new Profile(p.orderSource().json(), p.launches(), p.firstTouch(), p.kernels(), p.written());
    }

    /** How many kernels got each verdict, e.g. {@code 8 exact, 0 unsafe}. */
    public String summary() {
      long unsafe = kernels.values().stream().filter(k -> k.verdict() == AccessProfile.Verdict.UNSAFE).count();
      return (kernels.size() - unsafe) + " exact, " + unsafe + " unsafe";
    }
  }

  // ---- derived ----

  /** This manifest with {@code profile} instead of its own (e.g. a restore order to compare against). */
  public ImageManifest withProfile(Profile profile) {
    return new ImageManifest(schemaVersion, function, device, allocations, modules, hostState, samples, build, profile);
  }

  /** This manifest with {@code allocations} instead of its own. */
  public ImageManifest withAllocations(List<Allocation> allocations) {
    return new ImageManifest(schemaVersion, function, device, allocations, modules, hostState, samples, build, profile);
  }

  /** Every chunk the image names (allocation chunks and cubins), each once, in first-use order. */
  public Set<Digest> chunkDigests() {
    Set<Digest> all = new LinkedHashSet<>();
    allocations.forEach(a -> a.chunks().forEach(c -> all.add(c.digest())));
    modules.forEach(m -> all.add(m.cubin().digest()));
    return all;
  }

  /**
   * The allocations the profile saw no write to, which the HBM tier may keep on the device and share read-only;
   * empty when the profile does not say what was written.
   */
  public Set<String> readOnlyAllocations() {
    if (profile.writtenAllocations() == null) {
      return Set.of();
    }
    Set<String> out = new LinkedHashSet<>();
    allocations.forEach(a -> out.add(a.name()));
    profile.writtenAllocations().forEach(out::remove);
    return out;
  }

  /** Device bytes the allocations hold. */
  public long totalBytes() {
    return allocations.stream().mapToLong(Allocation::size).sum();
  }

  /**
   * The session table to rebuild from, with each module's cubin from {@code cubins} (by module name); a module
   * without one gets an empty cubin and is loaded from its PTX, as for another architecture.
   */
  public SessionTable sessionTable(Map<String, byte[]> cubins) {
    List<AllocationRecord> a = new ArrayList<>(allocations.size());
    allocations.forEach(x -> a.add(new AllocationRecord(x.name(), x.address(), x.size())));
    List<ModuleRecord> m = new ArrayList<>(modules.size());
    for (Module x : modules) {
      byte[] cubin = cubins.get(x.name());
      // No cubin: an arch no device has, so FunctionSession.rebuild takes the PTX.
      m.add(cubin == null ? new ModuleRecord(x.name(), x.ptx(), new byte[0], "ptx-only")
          : new ModuleRecord(x.name(), x.ptx(), cubin, x.arch()));
    }
    return new SessionTable(a, m);
  }

  // ---- JSON ----

  /** The manifest as UTF-8 JSON: what the store keeps under a tag. */
  public byte[] toBytes() {
    try {
      return JSON.writeValueAsBytes(this);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot write the manifest as JSON", e);
    }
  }

  /** The manifest as a JSON tree, e.g. for {@code thaw inspect --json}. */
  public JsonNode toTree() {
    return JSON.valueToTree(this);
  }

  /**
   * Reads and checks a manifest.
   *
   * @throws InvalidManifestException if it is not JSON, has another schema version, or a field is missing or
   *     wrong; the message names the field
   */
  public static ImageManifest read(byte[] json) {
    // The common case in one streaming pass (a large model's manifest is megabytes: building a tree first and
    // binding it after costs twice). Anything else, including a manifest of another schema version that happens
    // to bind, takes the checked path below, which names what is wrong.
    ImageManifest direct;
    try {
      direct = JSON.readValue(json, ImageManifest.class);
    } catch (IOException | RuntimeException e) {
      direct = null;
    }
    if (direct != null && direct.schemaVersion() == SCHEMA_VERSION) {
      direct.validate();
      return direct;
    }
    JsonNode tree;
    try {
      tree = JSON.readTree(json);
    } catch (IOException e) {
      throw new InvalidManifestException("the manifest is not JSON: " + originalMessage(e), e);
    }
    if (tree == null || !tree.isObject()) {
      throw new InvalidManifestException("the manifest is not a JSON object");
    }
    JsonNode version = tree.get("schemaVersion");
    if (version == null || !version.isInt()) {
      throw new InvalidManifestException("the manifest has no integer schemaVersion");
    }
    if (version.intValue() != SCHEMA_VERSION) {
      throw new InvalidManifestException("the manifest has schemaVersion " + version.intValue()
          + "; this Thaw reads schemaVersion " + SCHEMA_VERSION);
    }
    ImageManifest m;
    try {
      m = JSON.treeToValue(tree, ImageManifest.class);
    } catch (JsonMappingException e) {
      throw new InvalidManifestException("manifest field " + path(e) + ": " + originalMessage(e), e);
    } catch (JsonProcessingException | IllegalArgumentException e) {
      throw new InvalidManifestException("the manifest is malformed: " + originalMessage(e), e);
    }
    m.validate();
    return m;
  }

  /**
   * Checks what the JSON types do not: names, sizes, that chunks tile each allocation, architectures, totals.
   *
   * @throws InvalidManifestException naming the first field that is wrong
   */
  public void validate() {
    check(schemaVersion == SCHEMA_VERSION, "schemaVersion", "must be " + SCHEMA_VERSION);
    notBlank(function.className(), "function.className");
    check(function.config().isObject(), "function.config", "must be a JSON object");
    notBlank(device.name(), "device.name");
    check(device.computeCapability().matches("[0-9]+\\.[0-9]+"), "device.computeCapability",
        "must look like 9.0, not '" + device.computeCapability() + "'");
    check(ARCH.matcher(device.smArch()).matches(), "device.smArch", "must look like sm_90, not '" + device.smArch()
        + "'");
    check(device.driver().equals("cuda") || device.driver().equals("sim"), "device.driver",
        "must be cuda or sim, not '" + device.driver() + "'");
    Set<String> names = new HashSet<>();
    for (int i = 0; i < allocations.size(); i++) {
      Allocation a = allocations.get(i);
      String at = "allocations[" + i + "]";
      notBlank(a.name(), at + ".name");
      check(names.add(a.name()), at + ".name", "'" + a.name() + "' appears twice");
      check(a.address() != 0, at + ".address", "must not be 0");
      check(a.size() > 0, at + ".size", "must be positive, not " + a.size());
      long next = 0;
      // Thousands of chunks per image: the messages are built only for the chunk that fails.
      for (int j = 0; j < a.chunks().size(); j++) {
        Chunk c = a.chunks().get(j);
        if (c.offset() != next) {
          check(false, at + ".chunks[" + j + "].offset", "is " + c.offset() + " but the previous chunk ends at "
              + next);
        }
        if (c.length() <= 0) {
          check(false, at + ".chunks[" + j + "].length", "must be positive, not " + c.length());
        }
        next += c.length();
      }
      check(next == a.size(), at + ".chunks", "cover " + next + " bytes of an allocation of " + a.size());
    }
    Set<String> moduleNames = new HashSet<>();
    for (int i = 0; i < modules.size(); i++) {
      Module m = modules.get(i);
      String at = "modules[" + i + "]";
      notBlank(m.name(), at + ".name");
      check(moduleNames.add(m.name()), at + ".name", "'" + m.name() + "' appears twice");
      check(m.arch().equals(device.smArch()), at + ".arch", "is " + m.arch() + " but the image was built on "
          + device.smArch());
      check(m.cubin().length() > 0, at + ".cubin.length", "must be positive, not " + m.cubin().length());
      notBlank(m.ptx(), at + ".ptx");
      for (int j = 0; j < m.kernels().size(); j++) {
        Kernel k = m.kernels().get(j);
        notBlank(k.name(), at + ".kernels[" + j + "].name");
        for (Param p : k.params()) {
          check(p.offset() >= 0 && p.size() > 0 && p.offset() + p.size() <= k.paramBytes(),
              at + ".kernels[" + j + "].params", "parameter " + p.name() + " does not fit in " + k.paramBytes()
              + " bytes");
        }
      }
    }
    try {
      Instant.parse(build.created());
    } catch (DateTimeParseException e) {
      throw new InvalidManifestException("manifest field build.created: '" + build.created()
          + "' is not an ISO-8601 instant");
    }
    notBlank(build.thawVersion(), "build.thawVersion");
    check(build.totalBytes() == totalBytes(), "build.totalBytes", "is " + build.totalBytes()
        + " but the allocations hold " + totalBytes());
    check(build.uniqueBytes() >= 0, "build.uniqueBytes", "must not be negative");
  }

  private static void notBlank(String value, String field) {
    check(!value.isBlank(), field, "must not be empty");
  }

  private static void check(boolean ok, String field, String problem) {
    if (!ok) {
      throw new InvalidManifestException("manifest field " + field + ": " + problem);
    }
  }

  private static String path(JsonMappingException e) {
    StringBuilder sb = new StringBuilder();
    for (JsonMappingException.Reference r : e.getPath()) {
      if (r.getFieldName() != null) {
        sb.append(sb.length() == 0 ? "" : ".").append(r.getFieldName());
      } else if (r.getIndex() >= 0) {
        sb.append('[').append(r.getIndex()).append(']');
      }
    }
    return sb.length() == 0 ? "(root)" : sb.toString();
  }

  private static String originalMessage(Exception e) {
    String m = e instanceof JsonProcessingException j ? j.getOriginalMessage() : e.getMessage();
    // Jackson's messages run on with a source location and hints after the first line.
    return m == null ? e.getClass().getSimpleName() : m.lines().findFirst().orElse(m);
  }

  static final class DigestSerializer extends JsonSerializer<Digest> {
    @Override
    public void serialize(Digest value, JsonGenerator gen, SerializerProvider serializers) throws IOException {
      gen.writeString(value.toString());
    }
  }

  static final class DigestDeserializer extends JsonDeserializer<Digest> {
    @Override
    public Digest deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
      String text = p.getValueAsString();
      try {
        return Digest.parse(text);
      } catch (IllegalArgumentException e) {
        throw JsonMappingException.from(p, e.getMessage(), e);
      }
    }
  }

  /**
   * {@code schemaVersion} as a JSON integer and nothing Jackson would coerce to one ({@code "1"}, {@code 1.0}):
   * what {@link #read}'s checked path demands, so that its one-pass path accepts nothing more.
   */
  static final class IntegerOnlyDeserializer extends JsonDeserializer<Integer> {
    @Override
    public Integer deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
      if (p.currentToken() != JsonToken.VALUE_NUMBER_INT
          || p.getNumberType() != JsonParser.NumberType.INT) {
        throw JsonMappingException.from(p, "schemaVersion must be an integer");
      }
      return p.getIntValue();
    }
  }

  static final class HexAddressSerializer extends JsonSerializer<Long> {
    @Override
    public void serialize(Long value, JsonGenerator gen, SerializerProvider serializers) throws IOException {
      gen.writeString("0x" + Long.toHexString(value));
    }
  }

  static final class HexAddressDeserializer extends JsonDeserializer<Long> {
    @Override
    public Long deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
      String text = p.getValueAsString();
      if (text == null || !text.matches("0x[0-9a-fA-F]{1,16}")) {
        throw JsonMappingException.from(p, "a device address is a hex string like 0x7f0000000000, not " + text);
      }
      return Long.parseUnsignedLong(text.substring(2), 16);
    }
  }
}
