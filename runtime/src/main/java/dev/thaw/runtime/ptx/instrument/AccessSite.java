package dev.thaw.runtime.ptx.instrument;

/**
 * One checked instruction of an instrumented module.
 *
 * @param id the site id a violation reports: the instruction's index among all instructions of the
 *     original module, counted from 0 in text order
 * @param function the kernel or device function it is in
 * @param line its 1-based line in the original PTX
 * @param kind what it does
 * @param generic true for a generic address (checked only when it points to global memory)
 * @param instruction the original instruction, as PTX text
 */
public record AccessSite(int id, String function, int line, AccessOp kind, boolean generic, String instruction) {

  @Override
  public String toString() {
    return "site " + id + " (" + function + ", line " + line + ": " + instruction + ")";
  }
}
