package dev.thaw.runtime.function;

import com.fasterxml.jackson.annotation.JsonCreator;
import com.fasterxml.jackson.annotation.JsonValue;

/**
 * A reference to device memory allocated through a {@link FunctionSession}, by the name it was allocated
 * under. It serializes as that name, so host state that holds it survives a snapshot: the rebuilt session
 * has the same name at the same address. Resolve it with {@link FunctionSession#address(BufferRef)}.
 */
public record BufferRef(String name) {

  @JsonCreator
  public BufferRef {
    FunctionSession.checkName(name, "buffer");
  }

  @JsonValue
  @Override
  public String name() {
    return name;
  }
}
