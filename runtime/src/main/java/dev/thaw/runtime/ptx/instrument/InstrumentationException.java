package dev.thaw.runtime.ptx.instrument;

/**
 * A construct that {@link PtxInstrumenter} does not handle, refused rather than instrumented wrongly. Names
 * the function, the 1-based source line and the construct.
 */
public final class InstrumentationException extends RuntimeException {

  private final String function;
  private final int line;
  private final String construct;

  public InstrumentationException(String function, int line, String construct, String reason) {
    super("cannot instrument " + (function == null ? "module" : function) + ", line " + line + ": " + reason
        + (construct == null ? "" : " ('" + construct + "')"));
    this.function = function;
    this.line = line;
    this.construct = construct;
  }

  /** The kernel or device function, or null for a module-level refusal. */
  public String function() {
    return function;
  }

  public int line() {
    return line;
  }

  /** The statement refused, as PTX text; null for a module-level refusal. */
  public String construct() {
    return construct;
  }
}
