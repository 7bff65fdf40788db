package dev.thaw.server.impl;

import dev.thaw.server.FunctionOptions;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * One registration of a function: its options and image, the fair FIFO queue of its requests and the instances that
 * serve them. A name is served by one deployment at a time; one that was replaced or unregistered retires beside it
 * ({@link #retire}) until its queued and in-flight requests have finished on its own instances.
 *
 * <p>Invariant: read and written only under the {@link Scheduler}'s monitor, except the fields that are final.
 */
final class Deployment {

  final String name;
  final FunctionOptions options;
  final ImageInfo image;
  final ArrayDeque<Scheduler.Pending> queue = new ArrayDeque<>();
  final List<InstanceSlot> slots = new ArrayList<>();
  final CompletableFuture<Void> retired = new CompletableFuture<>();
  final ColdStartTraces traces;
  final ServerMetrics.Function meters;
  boolean retire;
  String lastStartFailure;
  /** Its image failed an integrity check: requests are refused with this until it is registered again. */
  ImageDamage damage;
  /** When its queued requests began to wait for room (memory or an instance slot) on a device; 0: not waiting. */
  long waitingForRoom;
  /** Its warm invokes' length, smoothed: the wake-ahead's prediction; 0: none yet. */
  long invokeNanos;

  Deployment(String name, FunctionOptions options, ImageInfo image, ColdStartTraces traces,
      ServerMetrics.Function meters) {
    this.name = name;
    this.options = options;
    this.image = image;
    this.traces = traces;
    this.meters = meters;
  }

  /** The live instance with the most room (at least one free place), or null. */
  InstanceSlot idleSlot() {
    InstanceSlot best = null;
    for (InstanceSlot s : slots) {
      if (s.instance != null && s.running < image.concurrency() && (best == null || s.running < best.running)) {
        best = s;
      }
    }
    return best;
  }

  int startingCount() {
    return (int) slots.stream().filter(s -> s.instance == null).count();
  }

  int liveCount() {
    return (int) slots.stream().filter(s -> s.instance != null).count();
  }

  /** Instances that could still be started: seats in the queue for the requests that will wait for them. */
  int startable() {
    return Math.max(0, options.maxInstances() - slots.size());
  }

  /** True while a request of it waits or runs. */
  boolean active() {
    return !queue.isEmpty() || slots.stream().anyMatch(InstanceSlot::busy);
  }
}
