package dev.thaw.pool.impl;

import dev.thaw.pool.PreparedImage;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Which registered images the pool's blank workers hold prepared: at most {@code capacity}, the most recently
 * cold-started first. A registration joins while there is room (it never pushes out an image a cold start used); a
 * cold start of an image outside the set brings it in and pushes out the least recently used; a new image under a
 * name replaces the old one where it stands. Each change says what workers must prepare and what they must drop.
 * Not thread-safe: the pool calls it under its lock.
 */
final class PrepareAhead {

  /** What blank workers do after a change: drop {@code drop} (keys), then prepare {@code add}. */
  record Change(List<PreparedImage> add, List<String> drop) {
    static final Change NONE = new Change(List.of(), List.of());

    boolean isEmpty() {
      return add.isEmpty() && drop.isEmpty();
    }
  }

  private final int capacity;
  /** Every registered image, by name. */
  private final Map<String, PreparedImage> known = new HashMap<>();
  /** The images held prepared, by name, least recently used first. */
  private final LinkedHashMap<String, PreparedImage> ahead = new LinkedHashMap<>(16, 0.75f, true);

  PrepareAhead(int capacity) {
    this.capacity = Math.max(0, capacity);
  }

  /** An image registered (or registered again, maybe with another manifest) under its name. */
  Change register(PreparedImage image) {
    known.put(image.name(), image);
    PreparedImage held = ahead.get(image.name());
    if (held != null) {
      if (held.key().equals(image.key()) && held.placement() == image.placement()) {
        return Change.NONE;
      }
      ahead.put(image.name(), image);
      List<String> drop = held.key().equals(image.key()) ? List.of() : List.of(held.key());
      return new Change(List.of(image), drop);
    }
    if (ahead.size() < capacity) {
      ahead.put(image.name(), image);
      return new Change(List.of(image), List.of());
    }
    return Change.NONE;
  }

  /** A cold start of {@code name}: it becomes the most recently used, entering the set if it was outside. */
  Change used(String name) {
    if (ahead.get(name) != null || capacity == 0) {
      return Change.NONE;
    }
    PreparedImage image = known.get(name);
    if (image == null) {
      return Change.NONE;
    }
    List<String> drop = new ArrayList<>();
    while (ahead.size() >= capacity) {
      String eldest = ahead.keySet().iterator().next();
      drop.add(ahead.remove(eldest).key());
    }
    ahead.put(name, image);
    return new Change(List.of(image), drop);
  }

  /** The image named {@code name} is no longer registered. */
  Change forget(String name) {
    known.remove(name);
    PreparedImage held = ahead.remove(name);
    return held == null ? Change.NONE : new Change(List.of(), List.of(held.key()));
  }

  /** The images held prepared, least recently used first: what a new worker prepares. */
  List<PreparedImage> ahead() {
    return List.copyOf(ahead.values());
  }
}
