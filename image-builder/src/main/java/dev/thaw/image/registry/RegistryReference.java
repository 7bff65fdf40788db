package dev.thaw.image.registry;

import dev.thaw.image.store.Digest;
import dev.thaw.image.store.Tags;
import java.util.Locale;
import java.util.regex.Pattern;

/**
 * Where an image lives in an OCI registry: {@code host[:port]/repository[:tag][@sha256:<hex>]}, as Docker and
 * ORAS write references, except that the registry host is never implied (no default registry).
 *
 * @param registry {@code host[:port]}: the first path component; it has a dot or a port, or is {@code localhost}
 * @param repository the repository, e.g. {@code thaw/gpt2}
 * @param tag the tag, or null when the reference names a digest only
 * @param digest the manifest's digest, or null
 */
public record RegistryReference(String registry, String repository, String tag, Digest digest) {

  /** The OCI distribution spec's repository name rule. */
  private static final Pattern REPOSITORY =
      Pattern.compile("[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*)*");
  private static final Pattern TAG = Pattern.compile("[A-Za-z0-9_][A-Za-z0-9._-]{0,127}");
  private static final Pattern HOST = Pattern.compile("[A-Za-z0-9.-]+(:[0-9]{1,5})?|\\[[0-9a-fA-F:]+\\](:[0-9]{1,5})?");

  public RegistryReference {
    if (tag == null && digest == null) {
      tag = "latest";
    }
  }

  /** True if {@code s} can only be a registry reference, never a local tag (local tags have no '/'). */
  public static boolean looksLikeReference(String s) {
    return s != null && s.indexOf('/') > 0;
  }

  /**
   * Parses a reference.
   *
   * @throws IllegalArgumentException naming the rule it breaks
   */
  public static RegistryReference parse(String s) {
    if (s == null || s.isBlank()) {
      throw new IllegalArgumentException("a registry reference must not be empty");
    }
    int slash = s.indexOf('/');
    if (slash <= 0) {
      throw new IllegalArgumentException("'" + s + "' is not a registry reference: it starts with the registry, "
          + "e.g. localhost:5000/thaw/gpt2:large");
    }
    String host = s.substring(0, slash);
    if (!(host.contains(".") || host.contains(":") || host.equals("localhost")) || !HOST.matcher(host).matches()) {
      throw new IllegalArgumentException("'" + s + "' does not start with a registry host (a name with a dot or a "
          + "port, or localhost), e.g. localhost:5000/thaw/gpt2:large");
    }
    String rest = s.substring(slash + 1);
    Digest digest = null;
    int at = rest.indexOf('@');
    if (at >= 0) {
      try {
        digest = Digest.parse(rest.substring(at + 1));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException("'" + s + "': " + e.getMessage(), e);
      }
      rest = rest.substring(0, at);
    }
    String tag = null;
    int colon = rest.lastIndexOf(':');
    if (colon >= 0) {
      tag = rest.substring(colon + 1);
      rest = rest.substring(0, colon);
      if (!TAG.matcher(tag).matches()) {
        throw new IllegalArgumentException("'" + s + "': tag '" + tag + "' must match " + TAG.pattern());
      }
    }
    if (!REPOSITORY.matcher(rest).matches()) {
      throw new IllegalArgumentException("'" + s + "': repository '" + rest + "' must be lowercase path components "
          + "of letters and digits, separated by . _ __ or -");
    }
    return new RegistryReference(host.toLowerCase(Locale.ROOT), rest, tag, digest);
  }

  /** What goes after {@code /manifests/}: the digest when there is one, else the tag. */
  public String manifestReference() {
    return digest != null ? digest.toString() : tag;
  }

  /** The same repository under another tag (and no digest). */
  public RegistryReference withTag(String newTag) {
    return new RegistryReference(registry, repository, newTag, null);
  }

  /** The same registry, another repository. */
  public RegistryReference inRepository(String otherRepository) {
    return parse(registry + "/" + otherRepository + ":" + (tag == null ? "latest" : tag));
  }

  /**
   * The local tag a pull stores the image under when none is given: the repository's last component and the
   * reference's tag ({@code localhost:5000/thaw/gpt2:large} → {@code gpt2:large}); for a digest, its first 12
   * hex digits.
   */
  public String defaultLocalTag() {
    String name = repository.substring(repository.lastIndexOf('/') + 1);
    String version = tag != null ? tag : digest.hex().substring(0, 12);
    return Tags.check(name + ":" + version);
  }

  /** Loopback registries speak plain HTTP, as Docker assumes for them; every other one HTTPS unless told. */
  public boolean isLoopback() {
    String host = registry.startsWith("[") ? registry.substring(0, registry.indexOf(']') + 1)
        : registry.contains(":") ? registry.substring(0, registry.indexOf(':')) : registry;
    return host.equals("localhost") || host.startsWith("127.") || host.equals("[::1]");
  }

  @Override
  public String toString() {
    return registry + "/" + repository + (tag != null ? ":" + tag : "") + (digest != null ? "@" + digest : "");
  }
}
