package dev.thaw.runtime.speculation;

import dev.thaw.runtime.ptx.instrument.AccessSite;

/**
 * Accesses of one instrumented instruction, in one launch, that fell outside the speculated set in the same way:
 * what a GPU guard reported, merged per instruction, allocation (or gap), reason and kind.
 *
 * @param violation where and why: {@code address} is the lowest offending byte, {@code bytes} the span up to the
 *     highest; an atomic is {@link AccessKind#READ_WRITE}, or the right it lacked when the reason is
 *     {@link Violation.Reason#WRONG_KIND}
 * @param accesses how many recorded accesses it merges
 * @param site the instruction, with its line in the original PTX
 */
public record SiteViolation(Violation violation, long accesses, AccessSite site) {

  @Override
  public String toString() {
    return violation + " (" + accesses + (accesses == 1 ? " access" : " accesses") + " by " + site + ")";
  }
}
