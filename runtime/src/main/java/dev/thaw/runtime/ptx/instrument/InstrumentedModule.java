package dev.thaw.runtime.ptx.instrument;

import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.stream.Collectors;

/**
 * The output of {@link PtxInstrumenter}: PTX in which every {@code .entry} takes one more, trailing
 * {@code .u64} parameter (the guard table's device address, {@link GuardTable}), and the sites it checks.
 *
 * @param ptx the instrumented module
 * @param kernels the {@code .entry} names, in order
 * @param sites every checked instruction, by ascending id
 */
public record InstrumentedModule(String ptx, List<String> kernels, List<AccessSite> sites) {

  public InstrumentedModule {
    kernels = List.copyOf(kernels);
    sites = List.copyOf(sites);
  }

  /** The site with that id. @throws IllegalArgumentException if no checked instruction has it */
  public AccessSite site(int id) {
    Map<Integer, AccessSite> byId = sites.stream().collect(Collectors.toMap(AccessSite::id, Function.identity()));
    AccessSite s = byId.get(id);
    if (s == null) {
      throw new IllegalArgumentException("no checked instruction has site id " + id);
    }
    return s;
  }

  /** The sites of one function. */
  public List<AccessSite> sitesOf(String function) {
    return sites.stream().filter(s -> s.function().equals(function)).toList();
  }
}
