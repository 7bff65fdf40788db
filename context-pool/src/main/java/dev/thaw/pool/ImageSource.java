package dev.thaw.pool;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Path;

/**
 * Where a worker reads an image's bytes from. Today: a chunk store on local disk, opened read-only by the
 * worker (every chunk verified on the way in). The host cache and HBM tiers add kinds here.
 *
 * @param kind {@code store}
 * @param path the store's folder
 */
public record ImageSource(String kind, Path path) {

  public static ImageSource store(Path path) {
    return new ImageSource("store", path.toAbsolutePath().normalize());
  }

  /** The form a BECOME frame carries. */
  public ObjectNode toJson() {
    ObjectNode n = JsonNodeFactory.instance.objectNode();
    n.put("kind", kind);
    n.put("path", path.toString());
    return n;
  }
}
