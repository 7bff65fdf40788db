package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import dev.thaw.runtime.gpu.GpuDriver;
import java.util.List;

/**
 * A function whose instance is a group of ranks, one session per device (a tensor-parallel model): each rank's image
 * names this function with that rank's host state, and none serves alone. A cold start restores every rank's session
 * onto its own device, in one process, and {@link #assemble}s the group over them; the group serves the requests.
 *
 * <p>{@link #init} and the single-session {@link #invoke} are not how a rank runs: a rank is built with its group
 * ({@link #record}: every rank's session recorded on its device at once, which the image builder snapshots one image per
 * rank) and invoked only through its group.
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

  /**
   * Records the group an image is built from, as {@link #init} makes one function's session: rank r's recording
   * session on {@code devices[r]} (its allocations, modules and uploads), from the function's config.
   *
   * @throws InvalidConfigException naming what is wrong with the config or the devices, before anything is allocated
   */
  Recording record(GpuDriver driver, int[] devices, JsonNode config) throws Exception;

  /**
   * A recorded group: what each rank's image holds, and its requests answered as the group will answer them once
   * restored (the image builder runs the sample requests through it, profiled). Closing it frees every rank's session.
   */
  interface Recording extends AutoCloseable {

    /** Rank {@code rank}'s recording session. */
    FunctionSession session(int rank);

    /** Rank {@code rank}'s host state, which its image records. */
    Object rankState(int rank);

    /** The group's config as its image keeps it. */
    JsonNode config();

    FunctionResponse invoke(FunctionRequest request);

    @Override
    void close();
  }

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
