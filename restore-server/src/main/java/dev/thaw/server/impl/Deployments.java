package dev.thaw.server.impl;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The deployments a {@link Scheduler} knows: the one serving each name, and those retiring (replaced or unregistered,
 * finishing their requests) beside them. Two deployments of one name exist only while one of them retires.
 *
 * <p>Invariant: used only under the {@link Scheduler}'s monitor, which guards it.
 */
final class Deployments {

  private final Map<String, Deployment> current = new LinkedHashMap<>();
  private final List<Deployment> retiring = new ArrayList<>();

  /** The deployment serving {@code name}, or null. */
  Deployment get(String name) {
    return current.get(name);
  }

  boolean serves(String name) {
    return current.containsKey(name);
  }

  /** Serves {@code d} under its name; returns the deployment it replaces, or null. */
  Deployment put(Deployment d) {
    return current.put(d.name, d);
  }

  /** Stops serving {@code name}; returns its deployment, or null. */
  Deployment remove(String name) {
    return current.remove(name);
  }

  /** The deployments serving now, in the order they were first registered. */
  Collection<Deployment> current() {
    return current.values();
  }

  Set<String> names() {
    return current.keySet();
  }

  /** True when a deployment serving now serves the image {@code tag} (two functions may serve one image). */
  boolean servesImage(String tag) {
    return current.values().stream().anyMatch(d -> d.image.tag().equals(tag));
  }

  void retiring(Deployment d) {
    retiring.add(d);
  }

  /** Takes {@code d} off the retiring ones; false when it was not among them. */
  boolean retired(Deployment d) {
    return retiring.remove(d);
  }

  /** The deployments named {@code name}: the current one and those retiring; one lookup, not a walk of all. */
  List<Deployment> named(String name) {
    List<Deployment> named = new ArrayList<>(1);
    Deployment d = current.get(name);
    if (d != null) {
      named.add(d);
    }
    for (Deployment r : retiring) {
      if (r.name.equals(name)) {
        named.add(r);
      }
    }
    return named;
  }

  /** Every deployment, retiring ones included: a copy, so the caller may register, retire or evict while walking it. */
  List<Deployment> all() {
    List<Deployment> all = new ArrayList<>(current.values());
    all.addAll(retiring);
    return all;
  }

  void clear() {
    current.clear();
    retiring.clear();
  }
}
