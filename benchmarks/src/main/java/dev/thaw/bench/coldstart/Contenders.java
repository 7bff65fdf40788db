package dev.thaw.bench.coldstart;

import java.util.List;

/**
 * Every contender the harness knows, in the order they run on each model. A new way to cold-start (the server
 * from the host cache or HBM-resident tier once it restores from them; on-demand restore) is one more
 * {@link Contender} in this list.
 */
final class Contenders {

  private static final List<Contender> ALL = List.of(
      new ThawProcessContender(),
      new ThawPoolColdContender(false, false),
      new ThawPoolColdContender(false, true),
      new ThawPoolColdContender(true, false),
      new ThawPoolColdContender(true, false, true),
      new ThawPoolWarmContender(),
      new ThawServerContender(true),
      new ThawServerContender(false),
      new PytorchScratchContender(),
      new DriverCheckpointContender());

  private Contenders() {}

  static List<Contender> all() {
    return ALL;
  }

  static List<String> ids() {
    return ALL.stream().map(Contender::id).toList();
  }

  /**
   * The contender with that id.
   *
   * @throws IllegalArgumentException naming the ids there are
   */
  static Contender named(String id) {
    return ALL.stream().filter(c -> c.id().equals(id)).findFirst()
        .orElseThrow(() -> new IllegalArgumentException("no contender '" + id + "'; known: " + String.join(", ", ids())));
  }
}
