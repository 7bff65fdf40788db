package dev.thaw.image.registry;

/** The registry wants credentials it was not given, or refused the ones it was (401/403 after authenticating). */
public final class RegistryAuthException extends RegistryException {

  public RegistryAuthException(String message, int status, String code) {
    super(message, status, code);
  }
}
