package dev.thaw.runtime.function;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Optional;

/**
 * A GPU inference function: the unit Thaw builds into an image and restores on a cold invoke.
 *
 * <p>A function has two phases.
 * <ol>
 *   <li>{@link #init} runs once, when the image is built. It does the expensive start-up — loads modules,
 *       allocates device memory, uploads weights, warms up — and returns the <em>host state</em> that
 *       {@code invoke} needs. Everything it does on the device goes through the {@link FunctionSession} it is
 *       given, which records it: every allocation (name, device address, size), every module (PTX and the
 *       cubin the JIT made) and kernel. That table, the device memory behind it and the host state are what
 *       an image holds.
 *   <li>{@link #invoke} serves one request from that state. On a cold start it runs in a session that was
 *       <em>rebuilt</em> from the image — same allocation names at the same device addresses, same modules —
 *       with the host state read back from JSON, and {@code init} never runs. So {@code invoke} must find
 *       everything it needs in the state and the session, and nothing in fields of the function object.
 * </ol>
 *
 * <h2>Host state</h2>
 * The state is a plain value that Jackson serializes: config, small tables, and <em>references</em> to device
 * resources — {@link BufferRef} for device memory, {@link KernelRef} for kernels — never raw addresses or
 * driver handles. A record is the natural shape:
 * <pre>{@code
 * record MlpState(int inputs, int outputs, List<BufferRef> weights, KernelRef linear) {}
 * }</pre>
 * Keep it small (it lives in the image manifest); large data belongs in device memory.
 *
 * <h2>Requests</h2>
 * Requests and responses are JSON ({@link FunctionRequest#json()}), with optional raw bytes beside it for
 * large binary input or output (an image for a vision model). A request the function cannot serve — a
 * missing field, a token id outside the vocabulary — is an {@link InvalidRequestException} with a message
 * naming what is wrong; it must leave device state fit for the next request.
 *
 * <h2>Threads</h2>
 * A function instance serves one request at a time on the session's thread; {@code invoke} may keep per-
 * request scratch memory in the state as buffers allocated at {@code init}. A function whose instance serves several
 * at once (a language model batching its sequences) says how many ({@link #concurrency}) and serves them through its
 * {@link #engine}, which owns the session while it runs.
 *
 * <h2>Streaming</h2>
 * A response may be sent in parts as it is made ({@link ResponseStream}: a language model's tokens as they are
 * decoded); the caller may cancel a request in flight, and the function then ends it at its next safe point.
 *
 * <p>Implementations need a public no-argument constructor: Thaw instantiates them by class name.
 *
 * @param <S> the host state's type
 */
public interface ThawFunction<S> {

  /** The host state's class, for Jackson. */
  Class<S> stateType();

  /**
   * Builds the function's device and host state once.
   *
   * @param session records everything done on the device; allocate and load only through it
   * @param config the function's configuration, as given to the image build ({@code {}} when none)
   * @return the host state {@link #invoke} needs
   * @throws InvalidConfigException if the configuration is not usable, naming what is wrong
   */
  S init(FunctionSession session, JsonNode config) throws Exception;

  /**
   * Serves one request.
   *
   * @throws InvalidRequestException if the request cannot be served, naming what is wrong
   */
  FunctionResponse invoke(FunctionSession session, S state, FunctionRequest request) throws Exception;

  /**
   * Serves one request, sending parts of its response through {@code stream} as they are made, and ending early when
   * the stream is cancelled. By default the response comes whole, from {@link #invoke(FunctionSession, Object,
   * FunctionRequest)}.
   *
   * @throws InvalidRequestException if the request cannot be served, naming what is wrong
   */
  default FunctionResponse invoke(FunctionSession session, S state, FunctionRequest request, ResponseStream stream)
      throws Exception {
    return invoke(session, state, request);
  }

  /**
   * How many requests one instance serves at once: 1 (the default) serves them one at a time through {@link #invoke};
   * more, and a server hands up to that many to the instance's {@link #engine} together. Read from the host state alone,
   * like {@link #signature}: a server calls it without restoring the image.
   */
  default int concurrency(S state) {
    return 1;
  }

  /**
   * The engine that serves an instance's concurrent requests, for a function whose {@link #concurrency} is above 1:
   * made once per instance after its restore (never at {@code init}: a thread is no part of an image), owning the
   * session until it is closed, before the session is.
   *
   * @throws UnsupportedOperationException for a function that serves one request at a time (the default)
   */
  default FunctionEngine engine(FunctionSession session, S state) {
    throw new UnsupportedOperationException(getClass().getName() + " serves one request at a time");
  }

  /**
   * Checks a request against the host state alone, with no device work, so that a cold start refuses a
   * request it cannot serve before it restores anything. {@link #invoke} must still check what it relies on;
   * the default accepts every request.
   *
   * @throws InvalidRequestException if the request cannot be served, naming what is wrong
   */
  default void validate(S state, FunctionRequest request) {}

  /**
   * What the requests and responses hold, for serving protocols that need to know (tensors for the KServe
   * v2 protocol, a language model for completions). Read from the host state alone: a server calls it without
   * restoring the image. {@link FunctionSignature#UNDECLARED} by default.
   */
  default FunctionSignature signature(S state) {
    return FunctionSignature.UNDECLARED;
  }

  /**
   * The tokenizer of a language model that brings its own (one of tiktoken's is named by
   * {@link FunctionSignature.LanguageModel#encoding} instead), for a server that speaks text. Read from the host
   * state alone, like {@link #signature}; it may read files the state names, so a server calls it off its event
   * loops and keeps the result. Empty by default.
   */
  default Optional<Tokenizer> tokenizer(S state) {
    return Optional.empty();
  }
}
