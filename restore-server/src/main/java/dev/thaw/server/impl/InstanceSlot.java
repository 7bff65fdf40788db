package dev.thaw.server.impl;

import dev.thaw.pool.ColdStartPlacement;
import dev.thaw.runtime.host.Threads;
import dev.thaw.server.spi.FunctionInstance;
import io.micrometer.core.instrument.Counter;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/**
 * One instance of a {@link Deployment}, from the moment its start is placed on a device until it is evicted: the
 * device, the instance once started, and its own thread, where its start, its blocking invokes and its close run. It
 * serves up to its image's {@code concurrency} requests at once ({@link #running}): the continuous batching of a
 * function whose engine batches them shares one instance between that many requests.
 *
 * <p>Invariant: read and written only under the {@link Scheduler}'s monitor, except its final fields and its
 * {@link #instance}, which is set before a request is dispatched to it and never changed after, so the thread that
 * finishes a request reads it without the monitor.
 */
final class InstanceSlot {

  final Deployment deployment;
  final int device;
  /** The devices it holds memory on: its device, or, for a group, rank r's device at r (rank 0's is {@link #device}). */
  final List<Integer> devices;
  /** Where and how its start was placed: the devices whose links it borrows are busy until it has started. */
  final ColdStartPlacement.Choice choice;
  final ExecutorService thread;
  final long startNanos = System.nanoTime();
  /** Null while it starts. */
  FunctionInstance instance;
  /** Requests dispatched to it and not yet finished: at most its image's concurrency. */
  int running;
  boolean evicted;
  long idleSince = System.nanoTime();
  long served;

  InstanceSlot(Deployment deployment, ColdStartPlacement.Choice choice, String threadName) {
    this(deployment, choice, List.of(choice.device()), threadName);
  }

  /** A group's instance: rank r on {@code devices.get(r)}, the choice's device rank 0's. */
  InstanceSlot(Deployment deployment, ColdStartPlacement.Choice choice, List<Integer> devices, String threadName) {
    this.deployment = deployment;
    this.device = choice.device();
    this.devices = List.copyOf(devices);
    this.choice = choice;
    this.thread = Executors.newSingleThreadExecutor(Threads.daemonFactory(threadName));
  }

  boolean busy() {
    return running > 0;
  }

  String state() {
    return instance == null ? "starting" : busy() ? "busy" : "idle";
  }

  /** Closes {@code instance} on this slot's thread, after what was queued there, and lets the thread end. */
  void closeOnThread(FunctionInstance instance, Counter closeFailures) {
    thread.execute(() -> {
      try {
        instance.close();
      } catch (RuntimeException e) {
        closeFailures.increment();
      }
    });
    thread.shutdown();
  }
}
