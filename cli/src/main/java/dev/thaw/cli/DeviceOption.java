package dev.thaw.cli;

import dev.thaw.runtime.gpu.DeviceChoice;
import java.util.Iterator;
import java.util.List;
import picocli.CommandLine;
import picocli.CommandLine.Option;

/** {@code --device cuda|sim|auto}, shared by the commands that open a driver. Null when not given. */
final class DeviceOption {

  @Option(names = "--device", paramLabel = "cuda|sim|auto", converter = Converter.class,
      completionCandidates = Candidates.class,
      description = "Driver to use: cuda (fail if no GPU is usable), sim (the simulated device) or auto "
          + "(a GPU when one is usable, else sim). Overrides THAW_DEVICE; default: THAW_DEVICE, else auto.")
  DeviceChoice choice;

  static final class Converter implements CommandLine.ITypeConverter<DeviceChoice> {
    @Override
    public DeviceChoice convert(String value) {
      if (value.isBlank()) {
        throw new CommandLine.TypeConversionException("an empty value is not a device; use cuda, sim or auto");
      }
      try {
        return DeviceChoice.parse(value);
      } catch (IllegalArgumentException e) {
        throw new CommandLine.TypeConversionException("'" + value + "' is not a device; use cuda, sim or auto");
      }
    }
  }

  static final class Candidates implements Iterable<String> {
    @Override
    public Iterator<String> iterator() {
      return List.of("cuda", "sim", "auto").iterator();
    }
  }
}
