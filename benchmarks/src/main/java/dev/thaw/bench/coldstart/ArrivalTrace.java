package dev.thaw.bench.coldstart;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * An open-loop arrival trace for a node of many functions: which function each request calls and when, fixed by a
 * seed so every policy sees the same trace.
 *
 * <ul>
 *   <li><b>Popularity</b>: Zipf over the functions, weight of rank r ∝ 1/r^{@code zipf}; which function holds which
 *       rank is a seeded shuffle (so the most popular is not the first registered).
 *   <li><b>Burstiness</b>: a two-state Markov-modulated Poisson process. In the calm state requests arrive at
 *       {@code rate} per second, in a burst at {@code rate × burstFactor}; each state lasts an exponential time of
 *       mean {@code calmSeconds} or {@code burstSeconds}. Published serverless traces (Azure Functions 2019,
 *       Shahrad et al., ATC'20) show most functions invoked less than once a minute and arrivals far burstier than
 *       Poisson: with a Zipf exponent of 1 over hundreds of functions, most functions here see one request or none.
 * </ul>
 *
 * @param functions how many functions the requests choose among (named by index)
 */
record ArrivalTrace(int functions, double zipf, double rate, double burstFactor, double calmSeconds,
    double burstSeconds, double seconds, long seed, List<Arrival> arrivals) {

  /** One request: when (seconds from the trace's start) and to which function (index). */
  record Arrival(double at, int function) {}

  static ArrivalTrace generate(int functions, double zipf, double rate, double burstFactor, double calmSeconds,
      double burstSeconds, double seconds, long seed) {
    if (functions < 1 || rate <= 0 || burstFactor < 1 || calmSeconds <= 0 || burstSeconds <= 0 || seconds <= 0) {
      throw new IllegalArgumentException("a trace needs functions ≥ 1, rate > 0, burstFactor ≥ 1, positive dwell "
          + "times and a positive length");
    }
    Random random = new Random(seed);
    int[] byRank = shuffled(functions, random);
    double[] cumulative = new double[functions];
    double sum = 0;
    for (int r = 0; r < functions; r++) {
      sum += 1 / Math.pow(r + 1, zipf);
      cumulative[r] = sum;
    }
    List<Arrival> arrivals = new ArrayList<>();
    double t = 0;
    boolean burst = false;
    double stateEnds = exponential(random, calmSeconds);
    while (true) {
      double now = rate * (burst ? burstFactor : 1);
      double next = t + exponential(random, 1 / now);
      if (next >= stateEnds) {
        // Memoryless: the next arrival is drawn afresh in the new state from where this one ended.
        t = stateEnds;
        burst = !burst;
        stateEnds = t + exponential(random, burst ? burstSeconds : calmSeconds);
        if (t >= seconds) {
          break;
        }
        continue;
      }
      t = next;
      if (t >= seconds) {
        break;
      }
      arrivals.add(new Arrival(t, byRank[rank(cumulative, random.nextDouble() * sum)]));
    }
    return new ArrivalTrace(functions, zipf, rate, burstFactor, calmSeconds, burstSeconds, seconds, seed,
        List.copyOf(arrivals));
  }

  /** How many distinct functions the trace calls. */
  long distinctFunctions() {
    return arrivals.stream().mapToInt(Arrival::function).distinct().count();
  }

  private static int rank(double[] cumulative, double u) {
    int lo = 0;
    int hi = cumulative.length - 1;
    while (lo < hi) {
      int mid = (lo + hi) >>> 1;
      if (cumulative[mid] < u) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  private static int[] shuffled(int n, Random random) {
    int[] a = new int[n];
    for (int i = 0; i < n; i++) {
      a[i] = i;
    }
    for (int i = n - 1; i > 0; i--) {
      int j = random.nextInt(i + 1);
      int x = a[i];
      a[i] = a[j];
      a[j] = x;
    }
    return a;
  }

  private static double exponential(Random random, double mean) {
    return -mean * Math.log(1 - random.nextDouble());
  }
}
