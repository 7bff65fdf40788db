package dev.thaw.server;

/**
 * The logs an operator reads, by logger name: a launcher raises them to INFO while the rest of the libraries stay at
 * its default level.
 */
public final class ServerLogs {

  /** One INFO line per request, with its phases. */
  public static final String REQUESTS = "dev.thaw.server.requests";
  /**
   * Server-side failures: one line per 5xx (WARN; INFO for a 503) with the request's id and the full message its
   * body leaves out.
   */
  public static final String ERRORS = "dev.thaw.server.errors";
  /** Instances: one line per cold start (the worker's phases), per registration, per pull. */
  public static final String INSTANCES = "dev.thaw.server.instances";

  private ServerLogs() {}
}
