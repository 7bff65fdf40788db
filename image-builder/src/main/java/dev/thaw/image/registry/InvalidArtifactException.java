package dev.thaw.image.registry;

/** What a registry serves under a reference is not a well-formed Thaw image artifact; nothing is stored. */
public final class InvalidArtifactException extends RegistryException {

  public InvalidArtifactException(String message) {
    super(message, 0, null);
  }
}
