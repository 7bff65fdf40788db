package dev.thaw.server.impl;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.thaw.server.spi.StartPhases;

/**
 * What {@code GET /v1/functions/{name}} and its trace show, rendered from a deployment and what the scheduler worked
 * out about it (whether it is ready, what the factory keeps of its image). It holds no state and changes nothing.
 *
 * <p>Invariant: called under the {@link Scheduler}'s monitor, so the deployment it reads holds still.
 */
final class FunctionStatus {

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  private FunctionStatus() {}

  /**
   * The state of a function that serves: its options, state, queue, image and each instance.
   *
   * @param imageTiers where the factory keeps its image, or null for nothing to say
   */
  static ObjectNode of(Deployment d, boolean ready, JsonNode imageTiers) {
    ObjectNode s = NODES.objectNode();
    s.put("name", d.name);
    s.set("options", d.options.toJson());
    s.put("state", d.liveCount() > 0 ? "warm" : d.startingCount() > 0 ? "starting" : "cold");
    s.put("ready", ready);
    s.put("function", d.image.manifest().function().className());
    s.put("deviceBytes", d.image.deviceBytes());
    s.put("queued", d.queue.size());
    if (imageTiers != null) {
      s.set("image", imageTiers);
    }
    if (d.lastStartFailure != null) {
      s.put("lastStartFailure", d.lastStartFailure);
    }
    instances(s.putArray("instances"), d);
    s.set("signature", Signatures.json(d.image.signature()));
    return s;
  }

  /** The state of a function whose image is being pulled: {@code state} is the pull's, and it has no instances. */
  static ObjectNode pulling(String name, ObjectNode state) {
    ObjectNode s = NODES.objectNode();
    s.put("name", name);
    s.setAll(state);
    s.put("ready", false);
    s.putArray("instances");
    return s;
  }

  /** Its recent cold starts as Chrome trace events ({@link ColdStartTraces}). */
  static ObjectNode trace(Deployment d) {
    return d.traces.json();
  }

  private static void instances(ArrayNode instances, Deployment d) {
    for (InstanceSlot slot : d.slots) {
      ObjectNode i = instances.addObject();
      i.put("state", slot.state());
      i.put("device", slot.device);
      if (slot.devices.size() > 1) {
        slot.devices.forEach(i.putArray("devices")::add);
      }
      i.put("served", slot.served);
      i.put("running", slot.running);
      if (slot.instance != null) {
        StartPhases p = slot.instance.startPhases();
        i.put("runs", slot.instance.describe());
        i.put("tier", p.tier());
        ObjectNode start = i.putObject("startMillis");
        start.put("acquire", p.acquireMillis());
        start.put("map", p.mapMillis());
        start.put("restore-wait", p.restoreMillis());
      }
    }
  }
}
