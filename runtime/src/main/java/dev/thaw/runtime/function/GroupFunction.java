package dev.thaw.runtime.function;

import java.util.List;

/**
 * A function whose instance is a group of ranks, one session per device (a tensor-parallel model): each rank's image
 * names this function with that rank's host state, and none serves alone. A cold start restores every rank's session
 * onto its own device, in one process, and {@link #assemble}s the group over them; the group serves the requests.
 *
 * <p>{@link #init} and the single-session {@link #invoke} are not how a rank runs: a rank is built with its group
 * (by whoever records the sessions, each on its device) and invoked only through its group.
 *
 * @param <S> a rank's host state
 */
public interface GroupFunction<S> extends ThawFunction<S> {

  /**
   * The group over the ranks' restored sessions and host states, rank r's at r: what serves the instance's requests
   * from now on. It may grant the ranks access to each other's memory; until it returns, the restores hold back their
   * background copies (a grant must not change a mapping while a copy into it is in flight).
   *
   * @throws IllegalArgumentException if the states are not the ranks 0 to n−1 of one group, or the devices cannot
   *     hold it (not peers)
   */
  Group assemble(List<FunctionSession> sessions, List<S> states);

  /** A group's requests, one at a time; closing it frees what it holds beyond the sessions (not the sessions). */
  interface Group extends AutoCloseable {

    /**
     * Serves one request on every rank.
     *
     * @throws InvalidRequestException naming what is wrong, before anything is launched
     */
    FunctionResponse invoke(FunctionRequest request, ResponseStream stream);

    @Override
    void close();
  }
}
