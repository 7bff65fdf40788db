package dev.thaw.image.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * Registry logins in Docker's credential file format ({@code config.json}'s {@code auths}: per registry, either
 * {@code auth} = base64 of {@code user:password}, or {@code username} and {@code password}). Credential helpers
 * ({@code credsStore}, {@code credHelpers}) and {@code identitytoken} are not supported: a registry that needs
 * them gets no credentials from here, and the error names {@link #source()}.
 */
public final class RegistryCredentials {

  /** A file in Docker's format that overrides the default. */
  public static final String ENV_AUTH_FILE = "THAW_REGISTRY_AUTH";

  public static final RegistryCredentials NONE = new RegistryCredentials(Map.of(), "no credentials");

  /** One registry's login. */
  public record Login(String username, String password) {
    @Override
    public String toString() {
      return "Login[" + username + "]";
    }
  }

  private final Map<String, Login> logins;
  private final String source;

  private RegistryCredentials(Map<String, Login> logins, String source) {
    this.logins = Map.copyOf(logins);
    this.source = source;
  }

  /** One login for one registry, e.g. in tests. */
  public static RegistryCredentials of(String registry, String username, String password) {
    return new RegistryCredentials(Map.of(normalize(registry), new Login(username, password)),
        "a login for " + registry);
  }

  /**
   * The file {@code THAW_REGISTRY_AUTH} names, else {@code $DOCKER_CONFIG/config.json}, else {@code
   * ~/.docker/config.json}; none when the chosen default file does not exist.
   *
   * @throws IllegalArgumentException if {@code THAW_REGISTRY_AUTH} names a missing file, or the file is malformed
   */
  public static RegistryCredentials fromEnvironment(Map<String, String> env) {
    String explicit = env.get(ENV_AUTH_FILE);
    if (explicit != null && !explicit.isBlank()) {
      return load(Path.of(explicit));
    }
    String dockerConfig = env.get("DOCKER_CONFIG");
    Path file = dockerConfig != null && !dockerConfig.isBlank() ? Path.of(dockerConfig, "config.json")
        : Path.of(System.getProperty("user.home"), ".docker", "config.json");
    return Files.exists(file) ? load(file) : NONE;
  }

  /**
   * Reads a file in Docker's format.
   *
   * @throws IllegalArgumentException if it is missing, not JSON, or an entry is malformed
   */
  public static RegistryCredentials load(Path file) {
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(Files.readAllBytes(file));
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot read registry credentials from " + file + ": " + e.getMessage(), e);
    }
    if (root == null || !root.isObject()) {
      throw new IllegalArgumentException(file + " is not a JSON object in Docker's config.json format");
    }
    Map<String, Login> logins = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = root.path("auths").fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      JsonNode entry = e.getValue();
      Login login;
      if (entry.hasNonNull("auth") && !entry.get("auth").asText().isEmpty()) {
        String decoded;
        try {
          decoded = new String(Base64.getDecoder().decode(entry.get("auth").asText()), StandardCharsets.UTF_8);
        } catch (IllegalArgumentException ex) {
          throw new IllegalArgumentException(file + ": auths." + e.getKey() + ".auth is not base64", ex);
        }
        int colon = decoded.indexOf(':');
        if (colon < 0) {
          throw new IllegalArgumentException(file + ": auths." + e.getKey() + ".auth is not base64 of user:password");
        }
        login = new Login(decoded.substring(0, colon), decoded.substring(colon + 1));
      } else if (entry.hasNonNull("username") && entry.hasNonNull("password")) {
        login = new Login(entry.get("username").asText(), entry.get("password").asText());
      } else {
        continue; // identitytoken-only or empty entries: a credential helper's, which we do not run
      }
      logins.put(normalize(e.getKey()), login);
    }
    return new RegistryCredentials(logins, file.toString());
  }

  /** The login for {@code registry} ({@code host[:port]}). */
  public Optional<Login> forRegistry(String registry) {
    return Optional.ofNullable(logins.get(normalize(registry)));
  }

  /** Where these came from, for error messages. */
  public String source() {
    return source;
  }

  /** {@code https://host:port/v1/} and {@code host:port} name the same registry. */
  static String normalize(String key) {
    String k = key.toLowerCase(Locale.ROOT);
    int scheme = k.indexOf("://");
    if (scheme >= 0) {
      k = k.substring(scheme + 3);
    }
    int slash = k.indexOf('/');
    return slash >= 0 ? k.substring(0, slash) : k;
  }
}
