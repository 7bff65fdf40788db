package dev.thaw.examples.collective;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * Where the issuing threads of a group's ranks meet before an exchange: each arrives once per exchange, and none
 * leaves until all have arrived. It spins a little before it parks, since the ranks issue the same work and arrive
 * close together; and it can be broken, so that a rank whose issuing failed releases the others instead of leaving
 * them waiting for it.
 *
 * <p>Tickets: arrival k of the group (counting from 1) belongs to exchange ⌈k / parties⌉; no thread takes a ticket
 * of exchange e + 1 before every ticket of e is taken, since it must first leave e.
 */
final class RankBarrier {

  /** Thrown in the threads waiting at a broken barrier, and at every arrival until it is reset. */
  static final class BrokenException extends RuntimeException {
    BrokenException(Throwable cause) {
      super("another rank of the group failed: " + cause, cause);
    }
  }

  private static final int SPINS = 2_000;
  private static final int YIELDS = 200;
  private static final long PARK_NANOS = 20_000;

  private final int parties;
  private final AtomicLong tickets = new AtomicLong();
  private final AtomicReference<Throwable> broken = new AtomicReference<>();

  RankBarrier(int parties) {
    this.parties = parties;
  }

  /** Arrives and waits for the others. */
  void await() {
    checkBroken();
    long ticket = tickets.incrementAndGet();
    long goal = (ticket + parties - 1) / parties * parties;
    int turns = 0;
    while (tickets.get() < goal) {
      checkBroken();
      if (turns < SPINS) {
        Thread.onSpinWait();
      } else if (turns < SPINS + YIELDS) {
        Thread.yield();
      } else {
        LockSupport.parkNanos(PARK_NANOS);
      }
      turns++;
    }
  }

  /** Releases every waiting thread, and fails every later arrival, with {@code cause}. */
  void breakWith(Throwable cause) {
    broken.compareAndSet(null, cause);
  }

  boolean isBroken() {
    return broken.get() != null;
  }

  /** A fresh barrier, for when no thread waits at it (between two runs of the group). */
  void reset() {
    tickets.set(0);
    broken.set(null);
  }

  private void checkBroken() {
    Throwable cause = broken.get();
    if (cause != null) {
      throw new BrokenException(cause);
    }
  }
}
