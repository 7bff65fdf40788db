package dev.thaw.runtime.function;

/** Instantiates a function by class name, with errors a user can act on. */
public final class FunctionLoader {

  private FunctionLoader() {}

  /**
   * A new instance of the named {@link ThawFunction}.
   *
   * @throws IllegalArgumentException if the class is missing, is not a ThawFunction, or cannot be made
   */
  public static ThawFunction<?> load(String className) {
    Class<?> type;
    try {
      type = Class.forName(className, true, Thread.currentThread().getContextClassLoader());
    } catch (ClassNotFoundException | LinkageError e) {
      throw new IllegalArgumentException("no function class " + className + " on the class path", e);
    }
    if (!ThawFunction.class.isAssignableFrom(type)) {
      throw new IllegalArgumentException(className + " is not a " + ThawFunction.class.getName());
    }
    try {
      return (ThawFunction<?>) type.getConstructor().newInstance();
    } catch (NoSuchMethodException e) {
      throw new IllegalArgumentException(className + " needs a public no-argument constructor", e);
    } catch (ReflectiveOperationException e) {
      throw new IllegalArgumentException("cannot instantiate " + className + ": " + e, e);
    }
  }
}
