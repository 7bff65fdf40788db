package dev.thaw.runtime.text;

/**
 * A chat template that does not compile (a syntax this engine does not read, named with its line), or that failed
 * while rendering: an error of the template's own ({@code raise_exception}: {@link #raised()}), or an operation on
 * values it cannot apply.
 */
public final class TemplateException extends RuntimeException {

  private final boolean raised;

  TemplateException(String message) {
    this(message, false);
  }

  TemplateException(String message, boolean raised) {
    super(message);
    this.raised = raised;
  }

  /** True when the template itself refused its input ({@code raise_exception(...)}): the caller's input is wrong. */
  public boolean raised() {
    return raised;
  }
}
