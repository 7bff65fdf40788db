package dev.thaw.cli;

import dev.thaw.image.registry.RegistryReference;
import dev.thaw.image.store.Tags;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.TypeConversionException;

/**
 * How the commands read a tag they are given: a tag that breaks the rule ({@link Tags}) is a usage error (exit 2)
 * at parse time, before any store is opened, on every command alike; a well-formed tag no image has is exit 4.
 */
final class TagParameters {

  private TagParameters() {}

  /** A tag. */
  static final class Tag implements ITypeConverter<String> {
    @Override
    public String convert(String value) {
      try {
        return Tags.check(value);
      } catch (IllegalArgumentException e) {
        throw new TypeConversionException(e.getMessage());
      }
    }
  }

  /** A tag, or a registry reference ({@code HOST[:PORT]/REPOSITORY[:TAG]}) where it has a {@code /}. */
  static final class TagOrReference implements ITypeConverter<String> {
    @Override
    public String convert(String value) {
      try {
        if (RegistryReference.looksLikeReference(value)) {
          RegistryReference.parse(value);
          return value;
        }
        return Tags.check(value);
      } catch (IllegalArgumentException e) {
        throw new TypeConversionException(e.getMessage());
      }
    }
  }
}
