package dev.thaw.server.impl;

import dev.thaw.server.ServeException;
import dev.thaw.server.TenantLimits;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;

/**
 * Which functions belong to which tenant, on a server shared by the function pods of a node (node mode). A pod
 * registers its function with its tenant key (a secret of its namespace, {@value #KEY_HEADER}); the first
 * registration of a name binds it to that key, and every later one must present the same key. The server answers
 * each registration with the function's token ({@value #TOKEN_HEADER}, random, kept only in this process's memory),
 * which every request to the function must carry: to anyone without it (or the admin token) an owned function does
 * not exist. Keys are kept only as SHA-256 hashes and compared in constant time.
 *
 * <p>Thread-safe.
 */
final class Tenants {

  /** The tenant key a function pod registers with. */
  static final String KEY_HEADER = "Thaw-Function-Key";
  /** The function's token, handed over at registration and carried by every request to it. */
  static final String TOKEN_HEADER = "Thaw-Function-Token";
  static final int MIN_KEY_LENGTH = 16;
  static final int MAX_KEY_LENGTH = 1024;

  private final TenantLimits limits;
  private final SecureRandom random = new SecureRandom();
  private final Map<String, Owner> owners = new HashMap<>();

  private record Owner(byte[] keyHash, byte[] token) {}

  /** A tenant's hold on a function: its token, and whether this registration made the hold. */
  record Claim(String token, boolean fresh) {}

  Tenants(TenantLimits limits) {
    this.limits = limits;
  }

  TenantLimits limits() {
    return limits;
  }

  /**
   * The hold of {@code key} on function {@code name}: the one it has, or a new one if nobody holds the name.
   *
   * @param heldByOperator true when the operator registered {@code name} (it is nobody's to claim)
   * @throws ServeException 400 for a key too short or too long, 409 {@code function_taken} when another key or the
   *     operator holds the name, 403 {@code over_limit} when this node holds as many tenant functions as it may
   */
  synchronized Claim claim(String name, String key, boolean heldByOperator) {
    byte[] hash = hash(key);
    Owner o = owners.get(name);
    if (o != null) {
      if (!MessageDigest.isEqual(o.keyHash, hash)) {
        throw taken(name, "another tenant");
      }
      return new Claim(new String(o.token, StandardCharsets.US_ASCII), false);
    }
    if (heldByOperator) {
      throw taken(name, "the node's operator");
    }
    if (owners.size() >= limits.maxFunctions()) {
      throw TenantLimits.overLimit("this node holds " + owners.size() + " tenant functions, its limit (maxFunctions)");
    }
    long mine = owners.values().stream().filter(x -> MessageDigest.isEqual(x.keyHash, hash)).count();
    if (mine >= limits.maxFunctionsPerKey()) {
      throw TenantLimits.overLimit("this tenant key holds " + mine + " functions on this node, its limit "
          + "(maxFunctionsPerKey)");
    }
    byte[] raw = new byte[32];
    random.nextBytes(raw);
    byte[] token = Base64.getUrlEncoder().withoutPadding().encode(raw);
    owners.put(name, new Owner(hash, token));
    return new Claim(new String(token, StandardCharsets.US_ASCII), true);
  }

  private static ServeException taken(String name, String by) {
    return new ServeException(409, "function_taken", "function '" + name + "' is registered on this node by " + by
        + "; choose another name");
  }

  /** True when {@code key} holds {@code name}. */
  synchronized boolean holds(String name, String key) {
    Owner o = owners.get(name);
    return o != null && key != null && MessageDigest.isEqual(o.keyHash, hash(key));
  }

  /** True when a tenant holds {@code name}. */
  synchronized boolean owned(String name) {
    return owners.containsKey(name);
  }

  /** True when {@code name} is nobody's, or {@code token} is its token. */
  synchronized boolean opens(String name, String token) {
    Owner o = owners.get(name);
    return o == null || token != null && MessageDigest.isEqual(o.token, token.getBytes(StandardCharsets.US_ASCII));
  }

  /** The function is gone: its name is free again. */
  synchronized void release(String name) {
    owners.remove(name);
  }

  /**
   * @throws ServeException 400 when the key is missing, too short or too long
   */
  static byte[] hash(String key) {
    if (key == null || key.isBlank()) {
      throw ServeException.badRequest("registering through the node socket needs the tenant key in " + KEY_HEADER);
    }
    if (key.length() < MIN_KEY_LENGTH || key.length() > MAX_KEY_LENGTH) {
      throw ServeException.badRequest("a tenant key has " + MIN_KEY_LENGTH + " to " + MAX_KEY_LENGTH
          + " characters, not " + key.length());
    }
    try {
      return MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is missing from this JVM", e);
    }
  }
}
